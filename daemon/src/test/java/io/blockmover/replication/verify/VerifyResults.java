package io.blockmover.replication.verify;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

import io.blockmover.protocol.FrameHeader;
import io.blockmover.protocol.FrameType;

/**
 * VERIFY_RESULT frames as a destination sends them, for tests that hand them to a {@link SourceVerifier}.
 */
public final class VerifyResults
{
    private VerifyResults()
    {
    }

    /**
     * @return the frame's header: the record's LSN, volume and offset, aux = the mask of differing sub-blocks.
     */
    public static FrameHeader header(final long lsn, final int volume, final long offset, final long mask)
    {
        return new FrameHeader().reset(FrameType.VERIFY_RESULT).volumeId(volume).sequence(lsn).offset(offset)
            .aux(mask).payloadLength(VerifyRecord.RESULT_LENGTH).seal();
    }

    /**
     * @return the frame's payload: the job id and the status.
     */
    public static ByteBuffer payload(final long jobId, final int status)
    {
        return ByteBuffer.allocate(VerifyRecord.RESULT_LENGTH).order(ByteOrder.LITTLE_ENDIAN)
            .putLong(0, jobId).putInt(VerifyRecord.RESULT_STATUS_OFFSET, status);
    }
}
