package io.blockmover.protocol;

/**
 * Layout of the fixed frame header that precedes every payload, on TCP and on RDMA alike. All fields are
 * little endian.
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |                      magic 0x524D4B42 "BKMR"                  |  0
 *  +---------------+---------------+-------------------------------+
 *  |    version    |     type      |            flags              |  4
 *  +---------------+---------------+-------------------------------+
 *  |                         session id                            |  8
 *  +---------------------------------------------------------------+
 *  |                         volume id                             |  12
 *  +---------------------------------------------------------------+
 *  |               sequence (chunk index, region or LSN)           |  16
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                       offset in bytes                         |  24
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                       payload length                          |  32
 *  +---------------------------------------------------------------+
 *  |                     CRC32C of the payload                     |  36
 *  +---------------------------------------------------------------+
 *  |                 aux (credits, count or error code)            |  40
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                          reserved                             |  48
 *  |                          (zero)                               |  ..
 *  +---------------------------------------------------------------+
 *  |                CRC32C of header bytes 0..59                   |  60
 *  +---------------------------------------------------------------+
 * </pre>
 * The header CRC lets a receiver trust the length before it reads the payload; the payload CRC is computed on
 * the bytes read with O_DIRECT into our own buffer, so it proves the data end to end.
 */
public final class FrameDescriptor
{
    /** "BKMR" read as a little-endian int. */
    public static final int MAGIC = 0x524D4B42;
    public static final int VERSION = 1;

    public static final int MAGIC_OFFSET = 0;
    public static final int VERSION_OFFSET = 4;
    public static final int TYPE_OFFSET = 5;
    public static final int FLAGS_OFFSET = 6;
    public static final int SESSION_ID_OFFSET = 8;
    public static final int VOLUME_ID_OFFSET = 12;
    public static final int SEQUENCE_OFFSET = 16;
    public static final int OFFSET_OFFSET = 24;
    public static final int LENGTH_OFFSET = 32;
    public static final int PAYLOAD_CRC_OFFSET = 36;
    public static final int AUX_OFFSET = 40;
    public static final int RESERVED_OFFSET = 48;
    public static final int HEADER_CRC_OFFSET = 60;

    /** Length of the header in bytes. */
    public static final int HEADER_LENGTH = 64;

    /**
     * CHUNK aux flag: the chunk holds only zeros, and the frame no payload; the chunk's length is the volume's
     * geometry. Sent only to a destination that offered "zero_chunks" in its OPENED.
     */
    public static final int CHUNK_ZEROES = 1;

    /** Largest payload of a control frame (HELLO, OPEN, ERROR, DIGEST): generous, never a chunk. */
    public static final int MAX_CONTROL_PAYLOAD = 64 * 1024;

    private FrameDescriptor()
    {
    }
}
