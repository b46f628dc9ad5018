package io.blockmover.protocol;

/**
 * Frame types of the replication protocol. The numeric codes are on the wire: never renumber.
 */
public enum FrameType
{
    /** Opens a connection: node name and a nonce; the server's reply also proves knowledge of the key. */
    HELLO(1),
    /** The client's proof of the shared key (HMAC over both nonces). */
    AUTH(2),
    /** Asks the destination to open a volume for a job (JSON payload). */
    OPEN(3),
    /** The destination opened the volume (JSON payload: size, credits). */
    OPENED(4),
    /**
     * A chunk of a volume: sequence = chunk index, offset = byte offset, payload = the data; or, with aux
     * {@link FrameDescriptor#CHUNK_ZEROES}, no payload for a chunk of zeros.
     */
    CHUNK(5),
    /** The chunk named by sequence is written on the destination (not yet durable); returns one credit. */
    ACK(6),
    /**
     * The chunk named by sequence arrived damaged; resend it; returns one credit. For a group: the record with LSN =
     * sequence arrived damaged; send the log again from it (the destination drops what comes before it).
     */
    NACK(7),
    /** Extra credits granted by the receiver (aux = number of credits). */
    CREDIT(8),
    /** Asks for region checksums: sequence = first region, aux = region count. */
    DIGEST_REQUEST(9),
    /** Region checksums: sequence = first region, aux = count, payload = count x u32 CRC32C (little endian). */
    DIGEST(10),
    /** Keeps an idle connection alive and proves the peer is. */
    HEARTBEAT(11),
    /** An error the peer should report: aux = error code ordinal, payload = UTF-8 message. */
    ERROR(12),
    /** The sender has finished; the receiver drains, forces and closes. */
    CLOSE(13),
    /**
     * A replicated write of a group: sequence = LSN, volume id = volume index in the group, offset = byte offset,
     * aux = record flags, payload = the data. The destination appends it to its log; ACK(sequence) says so.
     */
    RECORD(14),
    /**
     * Every chunk or record acknowledged before this frame is now durable on the destination (one force for many);
     * for a group, sequence = the highest durable LSN.
     */
    DURABLE(15),
    /** Asks a group's destination to make its log durable through LSN = sequence and answer DURABLE. */
    FLUSH(16),
    /**
     * The destination compared its copy of a region with the digests of a VERIFY record (see
     * io.blockmover.replication.verify.VerifyRecord): sequence = the record's LSN, volume id and offset as in the
     * record, aux = bit i set when sub-block i differs, payload = job id and status.
     */
    VERIFY_RESULT(17),
    /**
     * A group's settings changed on the source (JSON payload: rpo_target_ms, verify_interval_ms), for the destination
     * to keep for when it becomes the source. Sent only to a destination that offered it in its OPENED.
     */
    SETTINGS(18),
    /**
     * A group's source says how far ahead of its destination it is, about once a heartbeat interval while they are
     * linked, busy or idle: sequence = the source's last logged LSN, offset = bytes the destination may not hold
     * durably (the source's rpo_bytes), aux = how old the oldest of those writes is, in milliseconds (0 when there
     * is none), volume id = regions the source tracks in its bitmaps for resync (at most 2^31 - 1). No payload. Sent
     * only to a destination that offered it in its OPENED: it keeps the last one, so that it can say, even with the
     * source gone, how far behind it was when it last heard (what a failover would lose).
     */
    PROGRESS(19);

    private static final FrameType[] BY_CODE = new FrameType[32];

    static
    {
        for (final FrameType type : values())
        {
            BY_CODE[type.code] = type;
        }
    }

    private final int code;

    FrameType(final int code)
    {
        this.code = code;
    }

    /**
     * @return the code carried on the wire.
     */
    public int code()
    {
        return code;
    }

    /**
     * @param code from the wire.
     * @return the type, or null when the code is unknown.
     */
    public static FrameType fromCode(final int code)
    {
        return code >= 0 && code < BY_CODE.length ? BY_CODE[code] : null;
    }
}
