package io.blockmover.frontend.nbd;

/**
 * Constants of the NBD protocol (NetworkBlockDevice/nbd doc/proto.md); every field is big-endian.
 * <pre>
 * handshake, server first:
 *   S: u64 NBDMAGIC | u64 IHAVEOPT | u16 handshake flags
 *   C: u32 client flags
 * option request and reply:
 *   C: u64 IHAVEOPT | u32 option | u32 length | data[length]
 *   S: u64 OPTION_REPLY_MAGIC | u32 option | u32 reply type | u32 length | data[length]
 * transmission request (28 bytes), WRITE followed by length bytes of payload:
 *   0        4        6        8                16               24       28
 *   +--------+--------+--------+----------------+----------------+--------+
 *   | magic  | flags  | type   | cookie         | offset         | length |
 *   +--------+--------+--------+----------------+----------------+--------+
 * simple reply (16 bytes), a successful READ followed by length bytes of data:
 *   0        4        8                16
 *   +--------+--------+----------------+
 *   | magic  | error  | cookie         |
 *   +--------+--------+----------------+
 * structured reply chunk (20 bytes, once NBD_OPT_STRUCTURED_REPLY is agreed), then length bytes of payload:
 *   0        4        6        8                16       20
 *   +--------+--------+--------+----------------+--------+
 *   | magic  | flags  | type   | cookie         | length |
 *   +--------+--------+--------+----------------+--------+
 *   OFFSET_DATA: u64 offset, data; ERROR: u32 error, u16 message length, message;
 *   BLOCK_STATUS: u32 context id, then per extent u32 length, u32 flags (HOLE, ZERO).
 * </pre>
 */
public final class NbdProtocol
{
    public static final long NBDMAGIC = 0x4e42444d41474943L;
    public static final long IHAVEOPT = 0x49484156454F5054L;
    public static final long OPTION_REPLY_MAGIC = 0x3e889045565a9L;
    public static final int REQUEST_MAGIC = 0x25609513;
    public static final int SIMPLE_REPLY_MAGIC = 0x67446698;
    public static final int STRUCTURED_REPLY_MAGIC = 0x668e33ef;

    public static final int REQUEST_LENGTH = 28;
    public static final int SIMPLE_REPLY_LENGTH = 16;
    public static final int STRUCTURED_REPLY_LENGTH = 20;
    /** The longest reply header a slot writes: a structured OFFSET_DATA chunk's, with its offset. */
    public static final int MAX_REPLY_HEADER_LENGTH = STRUCTURED_REPLY_LENGTH + 8;

    public static final int FLAG_FIXED_NEWSTYLE = 1;
    public static final int FLAG_NO_ZEROES = 1 << 1;
    public static final int FLAG_C_FIXED_NEWSTYLE = 1;
    public static final int FLAG_C_NO_ZEROES = 1 << 1;

    public static final int OPT_EXPORT_NAME = 1;
    public static final int OPT_ABORT = 2;
    public static final int OPT_LIST = 3;
    public static final int OPT_STARTTLS = 5;
    public static final int OPT_INFO = 6;
    public static final int OPT_GO = 7;
    public static final int OPT_STRUCTURED_REPLY = 8;
    public static final int OPT_LIST_META_CONTEXT = 9;
    public static final int OPT_SET_META_CONTEXT = 10;

    public static final int REP_ACK = 1;
    public static final int REP_SERVER = 2;
    public static final int REP_INFO = 3;
    public static final int REP_META_CONTEXT = 4;
    public static final int REP_FLAG_ERROR = 1 << 31;
    public static final int REP_ERR_UNSUP = REP_FLAG_ERROR | 1;
    public static final int REP_ERR_POLICY = REP_FLAG_ERROR | 2;
    public static final int REP_ERR_INVALID = REP_FLAG_ERROR | 3;
    public static final int REP_ERR_UNKNOWN = REP_FLAG_ERROR | 6;
    public static final int REP_ERR_TOO_BIG = REP_FLAG_ERROR | 9;

    public static final int INFO_EXPORT = 0;
    public static final int INFO_NAME = 1;
    public static final int INFO_DESCRIPTION = 2;
    public static final int INFO_BLOCK_SIZE = 3;

    public static final int FLAG_HAS_FLAGS = 1;
    public static final int FLAG_READ_ONLY = 1 << 1;
    public static final int FLAG_SEND_FLUSH = 1 << 2;
    public static final int FLAG_SEND_FUA = 1 << 3;
    public static final int FLAG_SEND_TRIM = 1 << 5;
    public static final int FLAG_SEND_WRITE_ZEROES = 1 << 6;
    public static final int FLAG_CAN_MULTI_CONN = 1 << 8;

    public static final int CMD_READ = 0;
    public static final int CMD_WRITE = 1;
    public static final int CMD_DISC = 2;
    public static final int CMD_FLUSH = 3;
    public static final int CMD_TRIM = 4;
    public static final int CMD_WRITE_ZEROES = 6;
    public static final int CMD_BLOCK_STATUS = 7;

    public static final int CMD_FLAG_FUA = 1;
    public static final int CMD_FLAG_NO_HOLE = 1 << 1;
    public static final int CMD_FLAG_REQ_ONE = 1 << 3;

    public static final int REPLY_FLAG_DONE = 1;
    public static final int REPLY_TYPE_OFFSET_DATA = 1;
    public static final int REPLY_TYPE_BLOCK_STATUS = 5;
    public static final int REPLY_TYPE_ERROR = (1 << 15) + 1;

    /** The one metadata context served: which ranges are holes (and so read as zeros). */
    public static final String CONTEXT_ALLOCATION = "base:allocation";
    /** Its id on every connection that selects it. */
    public static final int CONTEXT_ALLOCATION_ID = 1;
    public static final int STATE_HOLE = 1;
    public static final int STATE_ZERO = 1 << 1;

    public static final int NBD_EPERM = 1;
    public static final int NBD_EIO = 5;
    public static final int NBD_ENOMEM = 12;
    public static final int NBD_EINVAL = 22;
    public static final int NBD_ENOSPC = 28;
    public static final int NBD_EOVERFLOW = 75;
    public static final int NBD_ENOTSUP = 95;
    public static final int NBD_ESHUTDOWN = 108;

    private NbdProtocol()
    {
    }
}
