/*
 * blockmover verbs shim: exported wrappers for the four data-path verbs that libibverbs only provides as
 * static inline functions in <infiniband/verbs.h>. Each wrapper is the inline function itself: one indirect
 * call through the provider's ops table in struct ibv_context, so the compiler, not Java, knows the offsets.
 *
 * Called from Java through JNA direct mapping (io.blockmover.rdma.verbs.VerbsShim) with plain integer
 * arguments: no marshalling and no allocation per call. Nothing here links against libibverbs; the
 * function pointers come from the context the caller's QP or CQ belongs to.
 */
#include <infiniband/verbs.h>

int bm_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
    return ibv_post_send(qp, wr, bad_wr);
}

int bm_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
    return ibv_post_recv(qp, wr, bad_wr);
}

int bm_ibv_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
    return ibv_poll_cq(cq, num_entries, wc);
}

int bm_ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
    return ibv_req_notify_cq(cq, solicited_only);
}
