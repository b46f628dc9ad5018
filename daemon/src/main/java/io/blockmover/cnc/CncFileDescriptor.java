package io.blockmover.cnc;

/**
 * Layout of the counters file that {@code blockmoverd} maps under its runtime directory and that
 * {@code blockmover stat} and monitoring read without talking to the daemon (Aeron's CnC file, reduced).
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |                 magic "BMCNC\0\0\0" (8 bytes)                 |  0
 *  +---------------------------------------------------------------+
 *  |                          version                              |  8
 *  +---------------------------------------------------------------+
 *  |                        daemon pid                             |  12
 *  +---------------------------------------------------------------+
 *  |                  start time, epoch ms (u64)                   |  16
 *  +---------------------------------------------------------------+
 *  |                   metadata buffer length                      |  24
 *  +---------------------------------------------------------------+
 *  |                    values buffer length                       |  28
 *  +---------------------------------------------------------------+
 *  |      conductor heartbeat, epoch ms, written each second       |  32
 *  +---------------------------------------------------------------+
 *  |                        reserved                               |  40
 *  +---------------------------------------------------------------+
 *  |             node name: u32 length + UTF-8 (max 60)            |  64
 *  +---------------------------------------------------------------+
 *  |                     metadata buffer                           |  128
 *  +---------------------------------------------------------------+
 *  |                      values buffer                            |  128 + metadata length
 *  +---------------------------------------------------------------+
 * </pre>
 * The metadata and values buffers are those of Agrona's {@code CountersManager}.
 */
public final class CncFileDescriptor
{
    public static final long MAGIC = 0x00000043_4E434D42L; // "BMCNC" little endian
    public static final int VERSION = 1;
    public static final int MAGIC_OFFSET = 0;
    public static final int VERSION_OFFSET = 8;
    public static final int PID_OFFSET = 12;
    public static final int START_TIME_OFFSET = 16;
    public static final int METADATA_LENGTH_OFFSET = 24;
    public static final int VALUES_LENGTH_OFFSET = 28;
    public static final int HEARTBEAT_OFFSET = 32;
    public static final int NODE_NAME_OFFSET = 64;
    public static final int MAX_NODE_NAME_LENGTH = 60;
    public static final int HEADER_LENGTH = 128;

    private CncFileDescriptor()
    {
    }
}
