/* softverbs: protection domains, memory regions, completion queues and queue pairs (see
 * device.c). */
#define _GNU_SOURCE
#include "softverbs.h"

/* ------------------------------------------------------------------------------------ */
/* Verbs: protection domains and memory regions                                         */

SV_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *c)
{
	struct ibv_pd *pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pd->context = c;
	return pd;
}

SV_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	free(pd);
	return 0;
}

SV_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
					  uint64_t iova, unsigned int access)
{
	struct sv_ctx *ctx = to_ctx(pd->context);
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & IBV_ACCESS_LOCAL_WRITE)) {
		errno = EINVAL; /* as the specification requires */
		return NULL;
	}
	struct sv_mr *mr = calloc(1, sizeof(*mr));
	if (!mr) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&ctx->lk);
	uint32_t slot = 0;
	while (slot < ctx->nmrs && ctx->mrs[slot])
		slot++;
	if (slot == ctx->nmrs) {
		uint32_t n = ctx->nmrs ? ctx->nmrs * 2 : 64;
		struct sv_mr **m = realloc(ctx->mrs, n * sizeof(*m));
		uint32_t *g = m ? realloc(ctx->mr_gen, n * sizeof(*g)) : NULL;
		if (m)
			ctx->mrs = m;
		if (!g || n > (1u << 24)) {
			pthread_mutex_unlock(&ctx->lk);
			free(mr);
			errno = ENOMEM;
			return NULL;
		}
		ctx->mr_gen = g;
		for (uint32_t i = ctx->nmrs; i < n; i++) {
			ctx->mrs[i] = NULL;
			ctx->mr_gen[i] = (i * 37u) & 0xff;
		}
		ctx->nmrs = n;
	}
	uint32_t key = (slot << 8) | (++ctx->mr_gen[slot] & 0xff);
	mr->mr.context = pd->context;
	mr->mr.pd = pd;
	mr->mr.addr = addr;
	mr->mr.length = length;
	mr->mr.handle = slot;
	mr->mr.lkey = key;
	mr->mr.rkey = key;
	mr->iova = iova;
	mr->access = access;
	ctx->mrs[slot] = mr;
	pthread_mutex_unlock(&ctx->lk);
	return &mr->mr;
}

#undef ibv_reg_mr
SV_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

#undef ibv_reg_mr_iova
SV_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
					 uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned)access);
}

SV_EXPORT int ibv_dereg_mr(struct ibv_mr *ibmr)
{
	struct sv_ctx *ctx = to_ctx(ibmr->context);
	pthread_mutex_lock(&ctx->lk);
	ctx->mrs[ibmr->handle] = NULL;
	pthread_mutex_unlock(&ctx->lk);
	free(ibmr);
	return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Verbs: completion queues                                                             */

SV_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c)
{
	(void)c;
	errno = EOPNOTSUPP; /* completion events are not emulated: poll the CQ */
	return NULL;
}

SV_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	(void)ch;
	return EINVAL;
}

SV_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context,
				       struct ibv_comp_channel *channel, int comp_vector)
{
	(void)comp_vector;
	if (channel) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (cqe < 1 || cqe > SV_MAX_CQE) {
		errno = EINVAL;
		return NULL;
	}
	struct sv_cq *cq = calloc(1, sizeof(*cq));
	if (!cq || !(cq->ring = calloc((size_t)cqe, sizeof(struct ibv_wc)))) {
		free(cq);
		errno = ENOMEM;
		return NULL;
	}
	cq->cap = (uint32_t)cqe;
	cq->cq.context = c;
	cq->cq.cq_context = cq_context;
	cq->cq.cqe = cqe;
	pthread_mutex_init(&cq->lk, NULL);
	pthread_mutex_init(&cq->cq.mutex, NULL);
	pthread_cond_init(&cq->cq.cond, NULL);
	return &cq->cq;
}

SV_EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq)
{
	struct sv_cq *cq = (struct sv_cq *)ibcq;
	free(cq->ring);
	free(cq);
	return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Verbs: queue pairs                                                                   */

static int bind_qp_socket(struct sv_qp *qp, const char *dir)
{
	struct sockaddr_un a;
	memset(&a, 0, sizeof(a));
	a.sun_family = AF_UNIX;
	/* QPNs unique per rendezvous directory: the first free one after a per-process start. */
	uint32_t start = ((uint32_t)getpid() * 2654435761u) & 0xfffff;
	for (uint32_t i = 0; i < 0x100000; i++) {
		uint32_t qpn = 0x100000 | ((start + i) & 0xfffff);
		snprintf(a.sun_path, sizeof(a.sun_path), "%s/qp-%06x", dir, qpn);
		if (bind(qp->fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
			qp->qp.qp_num = qpn;
			snprintf(qp->path, sizeof(qp->path), "%s", a.sun_path);
			return 0;
		}
		if (errno != EADDRINUSE)
			return -1;
	}
	errno = EAGAIN;
	return -1;
}

SV_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia)
{
	struct sv_ctx *ctx = to_ctx(pd->context);
	if (ia->qp_type != IBV_QPT_RC || ia->srq) {
		errno = EOPNOTSUPP; /* reliable connected only, without SRQ */
		return NULL;
	}
	struct ibv_qp_cap cap = ia->cap;
	if (!ia->send_cq || !ia->recv_cq || cap.max_send_wr > SV_MAX_WR ||
	    cap.max_recv_wr > SV_MAX_WR || cap.max_send_sge > SV_MAX_SGE ||
	    cap.max_recv_sge > SV_MAX_SGE || cap.max_inline_data > SV_MAX_INLINE) {
		errno = EINVAL;
		return NULL;
	}
	if (!cap.max_send_wr)
		cap.max_send_wr = 1;
	if (!cap.max_recv_wr)
		cap.max_recv_wr = 1;
	if (!cap.max_send_sge)
		cap.max_send_sge = 1;
	if (!cap.max_recv_sge)
		cap.max_recv_sge = 1;
	cap.max_inline_data = SV_MAX_INLINE;
	struct sv_qp *qp = calloc(1, sizeof(*qp));
	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	qp->sq = calloc(cap.max_send_wr, sizeof(*qp->sq));
	qp->rq = calloc(cap.max_recv_wr, sizeof(*qp->rq));
	qp->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (!qp->sq || !qp->rq || qp->fd < 0)
		goto fail;
	int sz = 4 << 20;
	setsockopt(qp->fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	setsockopt(qp->fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	pthread_mutex_lock(&ctx->lk);
	if (bind_qp_socket(qp, ctx->cfg->dir)) {
		pthread_mutex_unlock(&ctx->lk);
		goto fail;
	}
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = qp->qp.qp_num};
	if (epoll_ctl(ctx->ep, EPOLL_CTL_ADD, qp->fd, &ev)) {
		unlink(qp->path);
		pthread_mutex_unlock(&ctx->lk);
		goto fail;
	}
	qp->ctx = ctx;
	qp->cap = cap;
	qp->sq_sig_all = ia->sq_sig_all;
	qp->qp.context = pd->context;
	qp->qp.qp_context = ia->qp_context;
	qp->qp.pd = pd;
	qp->qp.send_cq = ia->send_cq;
	qp->qp.recv_cq = ia->recv_cq;
	qp->qp.state = IBV_QPS_RESET;
	qp->qp.qp_type = IBV_QPT_RC;
	qp->attr.qp_state = IBV_QPS_RESET;
	pthread_mutex_init(&qp->qp.mutex, NULL);
	pthread_cond_init(&qp->qp.cond, NULL);
	qp->next = ctx->qps;
	ctx->qps = qp;
	pthread_mutex_unlock(&ctx->lk);
	ia->cap = cap;
	return &qp->qp;
fail: {
	int e = errno;
	if (qp->fd >= 0)
		close(qp->fd);
	free(qp->sq);
	free(qp->rq);
	free(qp);
	errno = e ? e : ENOMEM;
	return NULL;
}
}

static void qp_reset(struct sv_qp *qp)
{
	qp->sq_head = qp->sq_next = qp->sq_tail = 0;
	qp->rq_head = qp->rq_tail = 0;
	qp->deadline = qp->rnr_until = qp->late_since = 0;
	qp->rx_off = 0;
	qp->nak_psn = 0;
	memset(qp->acache, 0, sizeof(qp->acache));
	while (qp->tx_head) {
		struct sv_tx *t = qp->tx_head;
		qp->tx_head = t->next;
		free(t);
	}
	qp->tx_tail = NULL;
}

/* The attributes each RC transition requires (IB specification, table "QP state
 * transition properties"). */
static int required_ok(enum ibv_qp_state from, enum ibv_qp_state to, int mask)
{
	int need = 0;
	if (from == IBV_QPS_RESET && to == IBV_QPS_INIT)
		need = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	else if (from == IBV_QPS_INIT && to == IBV_QPS_RTR)
		need = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
		       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	else if (from == IBV_QPS_RTR && to == IBV_QPS_RTS)
		need = IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
		       IBV_QP_MAX_QP_RD_ATOMIC;
	else if (to == IBV_QPS_RESET || to == IBV_QPS_ERR || (from == to && from != IBV_QPS_RESET))
		need = 0;
	else if (from == IBV_QPS_INIT && to == IBV_QPS_INIT)
		need = 0;
	else
		return 0; /* not a legal transition */
	return (mask & need) == need;
}

SV_EXPORT int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask)
{
	struct sv_qp *qp = (struct sv_qp *)ibqp;
	struct sv_ctx *ctx = qp->ctx;
	pthread_mutex_lock(&ctx->lk);
	enum ibv_qp_state from = qp->qp.state;
	enum ibv_qp_state to = (mask & IBV_QP_STATE) ? attr->qp_state : from;
	if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != from)
		goto inval;
	if (!required_ok(from, to, mask))
		goto inval;
	struct sv_config *cfg = ctx->cfg;
	if ((mask & IBV_QP_PORT) && attr->port_num != cfg->port)
		goto inval; /* the others are down */
	if ((mask & IBV_QP_AV) &&
	    ((attr->ah_attr.port_num && attr->ah_attr.port_num != cfg->port) ||
	     (attr->ah_attr.is_global && attr->ah_attr.grh.sgid_index >= cfg->ngids)))
		goto inval;
	if ((mask & IBV_QP_TIMEOUT) && attr->timeout > 31)
		goto inval;
	if ((mask & IBV_QP_RETRY_CNT) && attr->retry_cnt > 7)
		goto inval;
	if ((mask & IBV_QP_RNR_RETRY) && attr->rnr_retry > 7)
		goto inval;
	if ((mask & IBV_QP_DEST_QPN) && attr->dest_qp_num > SV_PSN_MASK)
		goto inval;
	if (mask & IBV_QP_ACCESS_FLAGS)
		qp->attr.qp_access_flags = attr->qp_access_flags;
	if (mask & IBV_QP_PKEY_INDEX)
		qp->attr.pkey_index = attr->pkey_index;
	if (mask & IBV_QP_PORT)
		qp->attr.port_num = attr->port_num;
	if (mask & IBV_QP_AV)
		qp->attr.ah_attr = attr->ah_attr;
	if (mask & IBV_QP_PATH_MTU)
		qp->attr.path_mtu = attr->path_mtu;
	if (mask & IBV_QP_DEST_QPN) {
		qp->attr.dest_qp_num = attr->dest_qp_num;
		memset(&qp->peer, 0, sizeof(qp->peer));
		qp->peer.sun_family = AF_UNIX;
		snprintf(qp->peer.sun_path, sizeof(qp->peer.sun_path), "%s/qp-%06x", cfg->dir,
			 attr->dest_qp_num);
		qp->peer_len = sizeof(qp->peer);
	}
	if (mask & IBV_QP_RQ_PSN) {
		qp->attr.rq_psn = attr->rq_psn & SV_PSN_MASK;
		qp->epsn = qp->attr.rq_psn;
	}
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		qp->attr.max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (mask & IBV_QP_MIN_RNR_TIMER)
		qp->attr.min_rnr_timer = attr->min_rnr_timer;
	if (mask & IBV_QP_SQ_PSN) {
		qp->attr.sq_psn = attr->sq_psn & SV_PSN_MASK;
		qp->next_psn = qp->attr.sq_psn;
	}
	if (mask & IBV_QP_TIMEOUT)
		qp->attr.timeout = attr->timeout;
	if (mask & IBV_QP_RETRY_CNT)
		qp->attr.retry_cnt = attr->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY)
		qp->attr.rnr_retry = attr->rnr_retry;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		qp->attr.max_rd_atomic = attr->max_rd_atomic;
	if (to != from) {
		if (to == IBV_QPS_RESET)
			qp_reset(qp);
		qp->qp.state = to;
		qp->attr.qp_state = to;
		if (to == IBV_QPS_ERR)
			sv_qp_to_error(qp);
		if (to == IBV_QPS_RTS) {
			qp->retry_left = qp->attr.retry_cnt;
			qp->rnr_left = qp->attr.rnr_retry;
			sv_sq_pump(qp);
		}
	}
	pthread_mutex_unlock(&ctx->lk);
	return 0;
inval:
	pthread_mutex_unlock(&ctx->lk);
	return EINVAL;
}

SV_EXPORT int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask,
			   struct ibv_qp_init_attr *init)
{
	struct sv_qp *qp = (struct sv_qp *)ibqp;
	(void)mask;
	pthread_mutex_lock(&qp->ctx->lk);
	*attr = qp->attr;
	attr->qp_state = qp->qp.state;
	attr->cur_qp_state = qp->qp.state;
	attr->cap = qp->cap;
	if (init) {
		memset(init, 0, sizeof(*init));
		init->qp_context = qp->qp.qp_context;
		init->send_cq = qp->qp.send_cq;
		init->recv_cq = qp->qp.recv_cq;
		init->cap = qp->cap;
		init->qp_type = IBV_QPT_RC;
		init->sq_sig_all = qp->sq_sig_all;
	}
	pthread_mutex_unlock(&qp->ctx->lk);
	return 0;
}

SV_EXPORT int ibv_destroy_qp(struct ibv_qp *ibqp)
{
	struct sv_qp *qp = (struct sv_qp *)ibqp;
	struct sv_ctx *ctx = qp->ctx;
	pthread_mutex_lock(&ctx->lk);
	for (struct sv_qp **p = &ctx->qps; *p; p = &(*p)->next)
		if (*p == qp) {
			*p = qp->next;
			break;
		}
	epoll_ctl(ctx->ep, EPOLL_CTL_DEL, qp->fd, NULL);
	qp_reset(qp);
	pthread_mutex_unlock(&ctx->lk);
	close(qp->fd);
	unlink(qp->path);
	for (uint32_t i = 0; i < qp->cap.max_send_wr; i++)
		free(qp->sq[i].inl);
	free(qp->sq);
	free(qp->rq);
	free(qp);
	return 0;
}

SV_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	(void)qp;
	errno = EOPNOTSUPP; /* the extended work-request API is not emulated */
	return NULL;
}

SV_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	(void)pd;
	(void)attr;
	errno = EOPNOTSUPP; /* address handles serve UD, which is not emulated */
	return NULL;
}

SV_EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
	(void)ah;
	return EINVAL;
}

