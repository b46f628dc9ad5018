/*
 * Prints "Class.CONSTANT value" for every offset, size and constant the Java verbs binding hard-codes, computed by
 * the compiler from the installed headers. VerbsLayoutTest compiles and runs this and compares both ways: every
 * Java constant must appear here with the same value, and every line here must match a Java constant.
 * Needs gcc, libibverbs-dev and librdmacm-dev.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define OFF(cls, name, type, field) printf("%s.%s %lld\n", #cls, #name, (long long)offsetof(type, field))
#define SIZE(cls, name, type) printf("%s.%s %lld\n", #cls, #name, (long long)sizeof(type))
#define VAL(cls, name, value) printf("%s.%s %lld\n", #cls, #name, (long long)(value))
#define SAME(cls, name) printf("%s.%s %lld\n", #cls, #name, (long long)(name))
#define WC(name) VAL(WorkCompletionStatus, name, IBV_WC_##name)
#define CM(name) VAL(RdmaCmEventType, name, RDMA_CM_EVENT_##name)

int main(void)
{
    OFF(IbvCompChannelDescriptor, FD_OFFSET, struct ibv_comp_channel, fd);
    SIZE(IbvCompChannelDescriptor, LENGTH, struct ibv_comp_channel);
    OFF(IbvSgeDescriptor, ADDR_OFFSET, struct ibv_sge, addr);
    OFF(IbvSgeDescriptor, LENGTH_OFFSET, struct ibv_sge, length);
    OFF(IbvSgeDescriptor, LKEY_OFFSET, struct ibv_sge, lkey);
    SIZE(IbvSgeDescriptor, LENGTH, struct ibv_sge);

    OFF(IbvSendWrDescriptor, WR_ID_OFFSET, struct ibv_send_wr, wr_id);
    OFF(IbvSendWrDescriptor, NEXT_OFFSET, struct ibv_send_wr, next);
    OFF(IbvSendWrDescriptor, SG_LIST_OFFSET, struct ibv_send_wr, sg_list);
    OFF(IbvSendWrDescriptor, NUM_SGE_OFFSET, struct ibv_send_wr, num_sge);
    OFF(IbvSendWrDescriptor, OPCODE_OFFSET, struct ibv_send_wr, opcode);
    OFF(IbvSendWrDescriptor, SEND_FLAGS_OFFSET, struct ibv_send_wr, send_flags);
    OFF(IbvSendWrDescriptor, IMM_DATA_OFFSET, struct ibv_send_wr, imm_data);
    OFF(IbvSendWrDescriptor, RDMA_REMOTE_ADDR_OFFSET, struct ibv_send_wr, wr.rdma.remote_addr);
    OFF(IbvSendWrDescriptor, RDMA_RKEY_OFFSET, struct ibv_send_wr, wr.rdma.rkey);
    SIZE(IbvSendWrDescriptor, LENGTH, struct ibv_send_wr);
    SAME(IbvSendWrDescriptor, IBV_WR_RDMA_WRITE);
    SAME(IbvSendWrDescriptor, IBV_WR_SEND);
    SAME(IbvSendWrDescriptor, IBV_WR_RDMA_READ);

    OFF(IbvRecvWrDescriptor, WR_ID_OFFSET, struct ibv_recv_wr, wr_id);
    OFF(IbvRecvWrDescriptor, NEXT_OFFSET, struct ibv_recv_wr, next);
    OFF(IbvRecvWrDescriptor, SG_LIST_OFFSET, struct ibv_recv_wr, sg_list);
    OFF(IbvRecvWrDescriptor, NUM_SGE_OFFSET, struct ibv_recv_wr, num_sge);
    SIZE(IbvRecvWrDescriptor, LENGTH, struct ibv_recv_wr);

    OFF(IbvWcDescriptor, WR_ID_OFFSET, struct ibv_wc, wr_id);
    OFF(IbvWcDescriptor, STATUS_OFFSET, struct ibv_wc, status);
    OFF(IbvWcDescriptor, OPCODE_OFFSET, struct ibv_wc, opcode);
    OFF(IbvWcDescriptor, VENDOR_ERR_OFFSET, struct ibv_wc, vendor_err);
    OFF(IbvWcDescriptor, BYTE_LEN_OFFSET, struct ibv_wc, byte_len);
    OFF(IbvWcDescriptor, QP_NUM_OFFSET, struct ibv_wc, qp_num);
    OFF(IbvWcDescriptor, WC_FLAGS_OFFSET, struct ibv_wc, wc_flags);
    SIZE(IbvWcDescriptor, LENGTH, struct ibv_wc);
    SAME(IbvWcDescriptor, IBV_WC_SEND);
    SAME(IbvWcDescriptor, IBV_WC_RDMA_WRITE);
    SAME(IbvWcDescriptor, IBV_WC_RDMA_READ);
    SAME(IbvWcDescriptor, IBV_WC_RECV);

    OFF(IbvMrDescriptor, ADDR_OFFSET, struct ibv_mr, addr);
    OFF(IbvMrDescriptor, LENGTH_OFFSET, struct ibv_mr, length);
    OFF(IbvMrDescriptor, LKEY_OFFSET, struct ibv_mr, lkey);
    OFF(IbvMrDescriptor, RKEY_OFFSET, struct ibv_mr, rkey);
    SIZE(IbvMrDescriptor, LENGTH, struct ibv_mr);
    SAME(IbvMrDescriptor, IBV_ACCESS_LOCAL_WRITE);
    SAME(IbvMrDescriptor, IBV_ACCESS_REMOTE_WRITE);
    SAME(IbvMrDescriptor, IBV_ACCESS_REMOTE_READ);

    OFF(IbvQpDescriptor, CONTEXT_OFFSET, struct ibv_qp, context);
    OFF(IbvQpDescriptor, QP_NUM_OFFSET, struct ibv_qp, qp_num);
    SIZE(IbvQpDescriptor, LENGTH, struct ibv_qp);

    OFF(IbvQpAttrDescriptor, QP_STATE_OFFSET, struct ibv_qp_attr, qp_state);
    SIZE(IbvQpAttrDescriptor, LENGTH, struct ibv_qp_attr);
    SAME(IbvQpAttrDescriptor, IBV_QPS_ERR);
    SAME(IbvQpAttrDescriptor, IBV_QP_STATE);

    OFF(IbvCqDescriptor, CONTEXT_OFFSET, struct ibv_cq, context);
    OFF(IbvCqDescriptor, CQE_OFFSET, struct ibv_cq, cqe);
    SIZE(IbvCqDescriptor, LENGTH, struct ibv_cq);

    OFF(IbvContextDescriptor, DEVICE_OFFSET, struct ibv_context, device);
    OFF(IbvContextDescriptor, OPS_POLL_CQ_OFFSET, struct ibv_context, ops.poll_cq);
    OFF(IbvContextDescriptor, OPS_REQ_NOTIFY_CQ_OFFSET, struct ibv_context, ops.req_notify_cq);
    OFF(IbvContextDescriptor, OPS_POST_SEND_OFFSET, struct ibv_context, ops.post_send);
    OFF(IbvContextDescriptor, OPS_POST_RECV_OFFSET, struct ibv_context, ops.post_recv);
    SIZE(IbvContextDescriptor, LENGTH, struct ibv_context);

    OFF(IbvDeviceAttrDescriptor, MAX_MR_SIZE_OFFSET, struct ibv_device_attr, max_mr_size);
    OFF(IbvDeviceAttrDescriptor, MAX_QP_WR_OFFSET, struct ibv_device_attr, max_qp_wr);
    OFF(IbvDeviceAttrDescriptor, MAX_SGE_OFFSET, struct ibv_device_attr, max_sge);
    OFF(IbvDeviceAttrDescriptor, MAX_CQE_OFFSET, struct ibv_device_attr, max_cqe);
    OFF(IbvDeviceAttrDescriptor, MAX_QP_RD_ATOM_OFFSET, struct ibv_device_attr, max_qp_rd_atom);
    OFF(IbvDeviceAttrDescriptor, MAX_QP_INIT_RD_ATOM_OFFSET, struct ibv_device_attr, max_qp_init_rd_atom);
    SIZE(IbvDeviceAttrDescriptor, LENGTH, struct ibv_device_attr);

    OFF(IbvQpInitAttrDescriptor, QP_CONTEXT_OFFSET, struct ibv_qp_init_attr, qp_context);
    OFF(IbvQpInitAttrDescriptor, SEND_CQ_OFFSET, struct ibv_qp_init_attr, send_cq);
    OFF(IbvQpInitAttrDescriptor, RECV_CQ_OFFSET, struct ibv_qp_init_attr, recv_cq);
    OFF(IbvQpInitAttrDescriptor, SRQ_OFFSET, struct ibv_qp_init_attr, srq);
    OFF(IbvQpInitAttrDescriptor, CAP_MAX_SEND_WR_OFFSET, struct ibv_qp_init_attr, cap.max_send_wr);
    OFF(IbvQpInitAttrDescriptor, CAP_MAX_RECV_WR_OFFSET, struct ibv_qp_init_attr, cap.max_recv_wr);
    OFF(IbvQpInitAttrDescriptor, CAP_MAX_SEND_SGE_OFFSET, struct ibv_qp_init_attr, cap.max_send_sge);
    OFF(IbvQpInitAttrDescriptor, CAP_MAX_RECV_SGE_OFFSET, struct ibv_qp_init_attr, cap.max_recv_sge);
    OFF(IbvQpInitAttrDescriptor, CAP_MAX_INLINE_DATA_OFFSET, struct ibv_qp_init_attr, cap.max_inline_data);
    OFF(IbvQpInitAttrDescriptor, QP_TYPE_OFFSET, struct ibv_qp_init_attr, qp_type);
    OFF(IbvQpInitAttrDescriptor, SQ_SIG_ALL_OFFSET, struct ibv_qp_init_attr, sq_sig_all);
    SIZE(IbvQpInitAttrDescriptor, LENGTH, struct ibv_qp_init_attr);
    SAME(IbvQpInitAttrDescriptor, IBV_QPT_RC);

    OFF(RdmaCmIdDescriptor, VERBS_OFFSET, struct rdma_cm_id, verbs);
    OFF(RdmaCmIdDescriptor, CHANNEL_OFFSET, struct rdma_cm_id, channel);
    OFF(RdmaCmIdDescriptor, QP_OFFSET, struct rdma_cm_id, qp);
    OFF(RdmaCmIdDescriptor, ROUTE_ADDR_SRC_ADDR_OFFSET, struct rdma_cm_id, route.addr.src_addr);
    OFF(RdmaCmIdDescriptor, ROUTE_ADDR_DST_ADDR_OFFSET, struct rdma_cm_id, route.addr.dst_addr);
    SIZE(RdmaCmIdDescriptor, LENGTH, struct rdma_cm_id);

    OFF(RdmaCmEventDescriptor, ID_OFFSET, struct rdma_cm_event, id);
    OFF(RdmaCmEventDescriptor, LISTEN_ID_OFFSET, struct rdma_cm_event, listen_id);
    OFF(RdmaCmEventDescriptor, EVENT_OFFSET, struct rdma_cm_event, event);
    OFF(RdmaCmEventDescriptor, STATUS_OFFSET, struct rdma_cm_event, status);
    OFF(RdmaCmEventDescriptor, CONN_PRIVATE_DATA_OFFSET, struct rdma_cm_event, param.conn.private_data);
    OFF(RdmaCmEventDescriptor, CONN_PRIVATE_DATA_LEN_OFFSET, struct rdma_cm_event, param.conn.private_data_len);
    OFF(RdmaCmEventDescriptor, CONN_RESPONDER_RESOURCES_OFFSET, struct rdma_cm_event,
        param.conn.responder_resources);
    OFF(RdmaCmEventDescriptor, CONN_INITIATOR_DEPTH_OFFSET, struct rdma_cm_event, param.conn.initiator_depth);
    OFF(RdmaCmEventDescriptor, CONN_QP_NUM_OFFSET, struct rdma_cm_event, param.conn.qp_num);
    SIZE(RdmaCmEventDescriptor, LENGTH, struct rdma_cm_event);

    OFF(RdmaConnParamDescriptor, PRIVATE_DATA_OFFSET, struct rdma_conn_param, private_data);
    OFF(RdmaConnParamDescriptor, PRIVATE_DATA_LEN_OFFSET, struct rdma_conn_param, private_data_len);
    OFF(RdmaConnParamDescriptor, RESPONDER_RESOURCES_OFFSET, struct rdma_conn_param, responder_resources);
    OFF(RdmaConnParamDescriptor, INITIATOR_DEPTH_OFFSET, struct rdma_conn_param, initiator_depth);
    OFF(RdmaConnParamDescriptor, FLOW_CONTROL_OFFSET, struct rdma_conn_param, flow_control);
    OFF(RdmaConnParamDescriptor, RETRY_COUNT_OFFSET, struct rdma_conn_param, retry_count);
    OFF(RdmaConnParamDescriptor, RNR_RETRY_COUNT_OFFSET, struct rdma_conn_param, rnr_retry_count);
    OFF(RdmaConnParamDescriptor, SRQ_OFFSET, struct rdma_conn_param, srq);
    OFF(RdmaConnParamDescriptor, QP_NUM_OFFSET, struct rdma_conn_param, qp_num);
    SIZE(RdmaConnParamDescriptor, LENGTH, struct rdma_conn_param);

    OFF(RdmaEventChannelDescriptor, FD_OFFSET, struct rdma_event_channel, fd);
    SIZE(RdmaEventChannelDescriptor, LENGTH, struct rdma_event_channel);

    SAME(SockaddrDescriptor, AF_INET);
    SAME(SockaddrDescriptor, AF_INET6);
    OFF(SockaddrDescriptor, FAMILY_OFFSET, struct sockaddr_in, sin_family);
    OFF(SockaddrDescriptor, PORT_OFFSET, struct sockaddr_in, sin_port);
    OFF(SockaddrDescriptor, IN_ADDR_OFFSET, struct sockaddr_in, sin_addr);
    SIZE(SockaddrDescriptor, IN_LENGTH, struct sockaddr_in);
    OFF(SockaddrDescriptor, IN6_FLOWINFO_OFFSET, struct sockaddr_in6, sin6_flowinfo);
    OFF(SockaddrDescriptor, IN6_ADDR_OFFSET, struct sockaddr_in6, sin6_addr);
    OFF(SockaddrDescriptor, IN6_SCOPE_ID_OFFSET, struct sockaddr_in6, sin6_scope_id);
    SIZE(SockaddrDescriptor, IN6_LENGTH, struct sockaddr_in6);
    if (offsetof(struct sockaddr_in6, sin6_family) != offsetof(struct sockaddr_in, sin_family) ||
        offsetof(struct sockaddr_in6, sin6_port) != offsetof(struct sockaddr_in, sin_port))
    {
        VAL(SockaddrDescriptor, FAMILY_PORT_DIFFER_IN_IPV6, 1);
    }

    SAME(IbVerbs, IBV_SEND_SIGNALED);
    SAME(IbVerbs, IBV_SEND_FENCE);
    SAME(RdmaCm, RDMA_PS_TCP);

    SAME(LibC, F_GETFL);
    SAME(LibC, F_SETFL);
    SAME(LibC, O_NONBLOCK);
    SAME(LibC, RLIMIT_MEMLOCK);
    VAL(LibC, RLIM_INFINITY, (long long)RLIM_INFINITY);
    OFF(LibC, RLIMIT_CUR_OFFSET, struct rlimit, rlim_cur);
    OFF(LibC, RLIMIT_MAX_OFFSET, struct rlimit, rlim_max);
    SIZE(LibC, RLIMIT_LENGTH, struct rlimit);
    SAME(LibC, POLLIN);
    SIZE(LibC, POLLFD_LENGTH, struct pollfd);
    OFF(LibC, POLLFD_EVENTS_OFFSET, struct pollfd, events);
    OFF(LibC, POLLFD_REVENTS_OFFSET, struct pollfd, revents);
    SAME(LibC, EFD_NONBLOCK);
    SAME(LibC, EFD_CLOEXEC);

    SAME(Errno, EPERM);
    SAME(Errno, ENOENT);
    SAME(Errno, EINTR);
    SAME(Errno, EIO);
    SAME(Errno, ENXIO);
    SAME(Errno, EBADF);
    SAME(Errno, EAGAIN);
    SAME(Errno, ENOMEM);
    SAME(Errno, EACCES);
    SAME(Errno, EFAULT);
    SAME(Errno, EBUSY);
    SAME(Errno, EEXIST);
    SAME(Errno, ENODEV);
    SAME(Errno, EINVAL);
    SAME(Errno, EMFILE);
    SAME(Errno, ENOSPC);
    SAME(Errno, ERANGE);
    SAME(Errno, ENOSYS);
    SAME(Errno, ENODATA);
    SAME(Errno, ETIME);
    SAME(Errno, EPROTO);
    SAME(Errno, EOPNOTSUPP);
    SAME(Errno, EADDRINUSE);
    SAME(Errno, EADDRNOTAVAIL);
    SAME(Errno, ENETDOWN);
    SAME(Errno, ENETUNREACH);
    SAME(Errno, ECONNABORTED);
    SAME(Errno, ECONNRESET);
    SAME(Errno, ENOBUFS);
    SAME(Errno, ENOTCONN);
    SAME(Errno, ETIMEDOUT);
    SAME(Errno, ECONNREFUSED);
    SAME(Errno, EHOSTUNREACH);
    SAME(Errno, EALREADY);
    SAME(Errno, EINPROGRESS);

    WC(SUCCESS); WC(LOC_LEN_ERR); WC(LOC_QP_OP_ERR); WC(LOC_EEC_OP_ERR); WC(LOC_PROT_ERR); WC(WR_FLUSH_ERR);
    WC(MW_BIND_ERR); WC(BAD_RESP_ERR); WC(LOC_ACCESS_ERR); WC(REM_INV_REQ_ERR); WC(REM_ACCESS_ERR);
    WC(REM_OP_ERR); WC(RETRY_EXC_ERR); WC(RNR_RETRY_EXC_ERR); WC(LOC_RDD_VIOL_ERR); WC(REM_INV_RD_REQ_ERR);
    WC(REM_ABORT_ERR); WC(INV_EECN_ERR); WC(INV_EEC_STATE_ERR); WC(FATAL_ERR); WC(RESP_TIMEOUT_ERR);
    WC(GENERAL_ERR); WC(TM_ERR); WC(TM_RNDV_INCOMPLETE);

    CM(ADDR_RESOLVED); CM(ADDR_ERROR); CM(ROUTE_RESOLVED); CM(ROUTE_ERROR); CM(CONNECT_REQUEST);
    CM(CONNECT_RESPONSE); CM(CONNECT_ERROR); CM(UNREACHABLE); CM(REJECTED); CM(ESTABLISHED); CM(DISCONNECTED);
    CM(DEVICE_REMOVAL); CM(MULTICAST_JOIN); CM(MULTICAST_ERROR); CM(ADDR_CHANGE); CM(TIMEWAIT_EXIT);

    return 0;
}
