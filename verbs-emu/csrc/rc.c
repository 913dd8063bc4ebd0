/* softverbs: the reliable-connected protocol between queue pairs, the device thread that
 * serves it, and the posting and polling verbs (see device.c). */
#define _GNU_SOURCE
#include "softverbs.h"

/* ------------------------------------------------------------------------------------ */
/* Completions                                                                          */

static void cq_push(struct ibv_cq *ibcq, const struct ibv_wc *wc)
{
	struct sv_cq *cq = (struct sv_cq *)ibcq;
	pthread_mutex_lock(&cq->lk);
	if (cq->count == cq->cap) {
		if (!cq->overrun)
			sv_warn("completion queue overrun (%u entries): completions lost", cq->cap);
		cq->overrun = 1;
	} else {
		cq->ring[(cq->head + cq->count) % cq->cap] = *wc;
		cq->count++;
		count(C_COMPLETIONS);
	}
	pthread_mutex_unlock(&cq->lk);
}

int sv_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
	struct sv_cq *cq = (struct sv_cq *)ibcq;
	int got = 0;
	pthread_mutex_lock(&cq->lk);
	if (cq->overrun) {
		pthread_mutex_unlock(&cq->lk);
		return -1;
	}
	while (got < n && cq->count) {
		wc[got++] = cq->ring[cq->head];
		cq->head = (cq->head + 1) % cq->cap;
		cq->count--;
	}
	pthread_mutex_unlock(&cq->lk);
	return got;
}

int sv_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	(void)cq;
	(void)solicited_only;
	return 0;
}

static enum ibv_wc_opcode wc_opcode_of(enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return IBV_WC_RDMA_WRITE;
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
		return IBV_WC_SEND;
	case IBV_WR_RDMA_READ:
		return IBV_WC_RDMA_READ;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		return IBV_WC_COMP_SWAP;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return IBV_WC_FETCH_ADD;
	default:
		return IBV_WC_SEND;
	}
}

static void send_cqe(struct sv_qp *qp, struct sv_swqe *w, enum ibv_wc_status st)
{
	struct ibv_wc wc;
	memset(&wc, 0, sizeof(wc));
	wc.wr_id = w->wr_id;
	wc.status = st;
	wc.opcode = wc_opcode_of(w->opcode);
	wc.qp_num = qp->qp.qp_num;
	if (st == IBV_WC_SUCCESS && w->opcode == IBV_WR_RDMA_READ)
		wc.byte_len = w->len;
	else if (st == IBV_WC_SUCCESS && (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
					   w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD))
		wc.byte_len = 8;
	cq_push(qp->qp.send_cq, &wc);
}

static struct sv_swqe *sq_at(struct sv_qp *qp, uint32_t i)
{
	return &qp->sq[i % qp->cap.max_send_wr];
}

/* The QP enters the error state: every outstanding work request is flushed. */
void sv_qp_to_error(struct sv_qp *qp)
{
	qp->qp.state = IBV_QPS_ERR;
	qp->attr.qp_state = IBV_QPS_ERR;
	qp->deadline = 0;
	qp->rnr_until = 0;
	for (; qp->sq_head != qp->sq_tail; qp->sq_head++)
		send_cqe(qp, sq_at(qp, qp->sq_head), IBV_WC_WR_FLUSH_ERR);
	qp->sq_next = qp->sq_tail;
	for (; qp->rq_head != qp->rq_tail; qp->rq_head++) {
		struct ibv_wc wc;
		memset(&wc, 0, sizeof(wc));
		wc.wr_id = qp->rq[qp->rq_head % qp->cap.max_recv_wr].wr_id;
		wc.status = IBV_WC_WR_FLUSH_ERR;
		wc.opcode = IBV_WC_RECV;
		wc.qp_num = qp->qp.qp_num;
		cq_push(qp->qp.recv_cq, &wc);
	}
	while (qp->tx_head) {
		struct sv_tx *t = qp->tx_head;
		qp->tx_head = t->next;
		free(t);
	}
	qp->tx_tail = NULL;
}

/* The oldest outstanding request failed with `st`: it completes with that status, the
 * rest is flushed. */
static void sq_fail_head(struct sv_qp *qp, enum ibv_wc_status st)
{
	if (qp->sq_head != qp->sq_tail) {
		send_cqe(qp, sq_at(qp, qp->sq_head), st);
		qp->sq_head++;
	}
	sv_qp_to_error(qp);
}

/* ------------------------------------------------------------------------------------ */
/* Memory                                                                               */

static struct sv_mr *mr_lookup(struct sv_ctx *ctx, uint32_t key)
{
	uint32_t slot = key >> 8;
	if (slot >= ctx->nmrs || !ctx->mrs[slot] || ctx->mrs[slot]->mr.lkey != key)
		return NULL;
	return ctx->mrs[slot];
}

/* Translates [addr, addr+len) under `key` for an access needing `need` (IBV_ACCESS_*
 * bits; 0 for a local read); NULL if the key, PD, bounds or rights do not allow it. */
static unsigned char *mr_translate(struct sv_ctx *ctx, struct ibv_pd *pd, uint32_t key,
				   uint64_t addr, uint64_t len, unsigned need)
{
	struct sv_mr *mr = mr_lookup(ctx, key);
	if (!mr || mr->mr.pd != pd)
		return NULL;
	if (addr < mr->iova || addr - mr->iova > mr->mr.length ||
	    len > mr->mr.length - (addr - mr->iova))
		return NULL;
	if ((mr->access & need) != need)
		return NULL;
	return (unsigned char *)mr->mr.addr + (addr - mr->iova);
}

/* Copies `n` bytes at message offset `off` between a scatter list and `buf`. */
static int sge_copy(struct sv_ctx *ctx, struct ibv_pd *pd, const struct ibv_sge *sge, int nsge,
		    uint32_t off, unsigned char *buf, uint32_t n, int to_sge)
{
	for (int i = 0; i < nsge && n; i++) {
		if (off >= sge[i].length) {
			off -= sge[i].length;
			continue;
		}
		uint32_t k = sge[i].length - off;
		if (k > n)
			k = n;
		unsigned char *p = mr_translate(ctx, pd, sge[i].lkey, sge[i].addr + off, k,
						to_sge ? IBV_ACCESS_LOCAL_WRITE : 0);
		if (!p)
			return -1;
		if (to_sge)
			sv_store_once(p, buf, k);
		else
			sv_load_once(buf, p, k);
		buf += k;
		n -= k;
		off = 0;
	}
	return n ? -1 : 0;
}

static int sge_check(struct sv_ctx *ctx, struct ibv_pd *pd, const struct ibv_sge *sge, int nsge,
		     unsigned need)
{
	for (int i = 0; i < nsge; i++)
		if (sge[i].length &&
		    !mr_translate(ctx, pd, sge[i].lkey, sge[i].addr, sge[i].length, need))
			return -1;
	return 0;
}

/* ------------------------------------------------------------------------------------ */
/* The link                                                                             */

static int fault_drop(struct sv_config *cfg)
{
	if (__atomic_load_n(&cfg->unreachable, __ATOMIC_RELAXED))
		return 1;
	unsigned long n = __atomic_add_fetch(&cfg->sent, 1, __ATOMIC_RELAXED);
	if (cfg->drop_every && n % (unsigned long)cfg->drop_every == 0)
		return 1;
	long d = __atomic_load_n(&cfg->drop_next, __ATOMIC_RELAXED);
	while (d > 0) {
		if (__atomic_compare_exchange_n(&cfg->drop_next, &d, d - 1, 0, __ATOMIC_RELAXED,
						__ATOMIC_RELAXED))
			return 1;
	}
	return 0;
}

static void tx_queue(struct sv_qp *qp, const struct iovec *iov, int niov, size_t len)
{
	struct sv_tx *t = malloc(sizeof(*t) + len);
	if (!t) {
		sv_warn("out of memory: packet lost");
		return;
	}
	t->next = NULL;
	t->len = len;
	size_t o = 0;
	for (int i = 0; i < niov; i++) {
		memcpy(t->data + o, iov[i].iov_base, iov[i].iov_len);
		o += iov[i].iov_len;
	}
	if (qp->tx_tail)
		qp->tx_tail->next = t;
	else
		qp->tx_head = t;
	qp->tx_tail = t;
	uint64_t one = 1;
	if (write(qp->ctx->wake, &one, sizeof(one)) < 0) {
		/* the counter is saturated: the thread is awake anyway */
	}
}

/* Returns 0 when taken (or lost on the link), 1 when the socket is full. */
static int tx_raw(struct sv_qp *qp, const struct iovec *iov, int niov)
{
	struct msghdr m;
	memset(&m, 0, sizeof(m));
	m.msg_name = &qp->peer;
	m.msg_namelen = qp->peer_len;
	m.msg_iov = (struct iovec *)iov;
	m.msg_iovlen = (size_t)niov;
	for (;;) {
		if (sendmsg(qp->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0)
			return 0;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
			return 1;
		/* ECONNREFUSED, ENOENT: nobody listens any more, the packet is lost. */
		return 0;
	}
}

static void tx(struct sv_qp *qp, struct sv_pkt *h, const void *payload, uint32_t n)
{
	struct sv_config *cfg = qp->ctx->cfg;
	h->magic = SV_MAGIC;
	h->src_qpn = qp->qp.qp_num;
	h->dst_qpn = qp->attr.dest_qp_num;
	h->src_lid = cfg->lid;
	h->dst_lid = qp->attr.ah_attr.dlid;
	memcpy(h->src_gid, cfg->gid[qp->attr.ah_attr.is_global ? qp->attr.ah_attr.grh.sgid_index : 0].raw,
	       16);
	if (qp->attr.ah_attr.is_global) {
		h->flags |= F_GRH;
		memcpy(h->dst_gid, qp->attr.ah_attr.grh.dgid.raw, 16);
	}
	h->frag = n;
	if (cfg->delay_us)
		usleep((useconds_t)cfg->delay_us);
	count(C_SENT);
	if (fault_drop(cfg)) {
		count(C_DROPPED);
		return;
	}
	struct iovec iov[2] = {{h, sizeof(*h)}, {(void *)payload, n}};
	int niov = n ? 2 : 1;
	if (qp->tx_head || tx_raw(qp, iov, niov))
		tx_queue(qp, iov, niov, sizeof(*h) + n);
}

static void tx_flush(struct sv_qp *qp)
{
	while (qp->tx_head) {
		struct sv_tx *t = qp->tx_head;
		struct iovec iov = {t->data, t->len};
		if (tx_raw(qp, &iov, 1))
			return;
		qp->tx_head = t->next;
		if (!qp->tx_head)
			qp->tx_tail = NULL;
		free(t);
	}
}

/* ------------------------------------------------------------------------------------ */
/* Requester                                                                            */

static uint64_t qp_timeout_ns(struct sv_qp *qp)
{
	uint64_t t = qp->attr.timeout;
	if (!t)
		return 0; /* infinite: the IB meaning of 0 */
	uint64_t ns = t >= 31 ? UINT64_MAX / 4 : 4096ull << t;
	uint64_t floor = qp->ctx->cfg->min_timeout_ns;
	return ns < floor ? floor : ns;
}

static void arm_timer(struct sv_qp *qp)
{
	uint64_t t = qp_timeout_ns(qp);
	qp->deadline = t ? now_ns() + t : 0;
}

/* Sends request `w` (again); returns -1 on a local error (recorded in w->lerr). */
static int sq_send_one(struct sv_qp *qp, struct sv_swqe *w)
{
	struct sv_ctx *ctx = qp->ctx;
	struct sv_pkt h;
	memset(&h, 0, sizeof(h));
	h.psn = w->psn;
	h.raddr = w->raddr;
	h.rkey = w->rkey;
	h.len = w->len;
	switch (w->opcode) {
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_SEND_WITH_IMM:
		h.flags = F_IMM;
		h.imm = w->imm;
		/* fall through */
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_SEND: {
		h.op = (w->opcode == IBV_WR_SEND || w->opcode == IBV_WR_SEND_WITH_IMM) ? OP_SEND
											 : OP_WRITE;
		if (!w->inl && sge_check(ctx, qp->qp.pd, w->sge, w->nsge, 0)) {
			w->lerr = IBV_WC_LOC_PROT_ERR;
			return -1;
		}
		uint32_t off = 0;
		do {
			uint32_t n = w->len - off > SV_FRAG ? SV_FRAG : w->len - off;
			const unsigned char *p;
			if (w->inl)
				p = w->inl + off;
			else {
				sge_copy(ctx, qp->qp.pd, w->sge, w->nsge, off, ctx->txbuf, n, 0);
				p = ctx->txbuf;
			}
			h.off = off;
			h.flags = (uint8_t)((h.flags & ~F_LAST) | (off + n == w->len ? F_LAST : 0));
			tx(qp, &h, p, n);
			off += n;
		} while (off < w->len);
		return 0;
	}
	case IBV_WR_RDMA_READ:
		if (sge_check(ctx, qp->qp.pd, w->sge, w->nsge, IBV_ACCESS_LOCAL_WRITE)) {
			w->lerr = IBV_WC_LOC_PROT_ERR;
			return -1;
		}
		w->rd_got = 0;
		h.op = OP_READ_REQ;
		tx(qp, &h, NULL, 0);
		return 0;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		if (w->nsge != 1 || w->sge[0].length != 8) {
			w->lerr = IBV_WC_LOC_LEN_ERR;
			return -1;
		}
		if (sge_check(ctx, qp->qp.pd, w->sge, 1, IBV_ACCESS_LOCAL_WRITE)) {
			w->lerr = IBV_WC_LOC_PROT_ERR;
			return -1;
		}
		h.op = w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? OP_CMP_SWAP : OP_FETCH_ADD;
		h.len = 8;
		h.cmp_add = w->cmp_add;
		h.swap = w->swap;
		tx(qp, &h, NULL, 0);
		return 0;
	default:
		w->lerr = IBV_WC_LOC_QP_OP_ERR;
		return -1;
	}
}

/* Completes the head while it is a finished request; a local error at the head fails it. */
static void sq_settle_head(struct sv_qp *qp)
{
	if (qp->sq_head != qp->sq_tail && qp->sq_head == qp->sq_next &&
	    sq_at(qp, qp->sq_head)->lerr != IBV_WC_SUCCESS)
		sq_fail_head(qp, sq_at(qp, qp->sq_head)->lerr);
}

/* Transmits the queued requests. */
void sv_sq_pump(struct sv_qp *qp)
{
	if (qp->qp.state != IBV_QPS_RTS)
		return;
	while (qp->sq_next != qp->sq_tail) {
		struct sv_swqe *w = sq_at(qp, qp->sq_next);
		if (w->lerr != IBV_WC_SUCCESS || sq_send_one(qp, w))
			break;
		if (qp->sq_next == qp->sq_head)
			arm_timer(qp);
		qp->sq_next++;
	}
	sq_settle_head(qp);
}

static void sq_complete_head(struct sv_qp *qp)
{
	struct sv_swqe *w = sq_at(qp, qp->sq_head);
	if (qp->sq_sig_all || (w->flags & IBV_SEND_SIGNALED))
		send_cqe(qp, w, IBV_WC_SUCCESS);
	qp->sq_head++;
	qp->retry_left = qp->attr.retry_cnt;
	qp->rnr_left = qp->attr.rnr_retry;
	qp->late_since = 0;
	if (qp->sq_head == qp->sq_next)
		qp->deadline = 0;
	else
		arm_timer(qp);
}

/* Every request before `psn` was executed by the responder (it answers in order): complete
 * those that need nothing more.  Returns 0 when the head is now `psn`'s request. */
static int sq_ack_before(struct sv_qp *qp, uint32_t psn)
{
	while (qp->sq_head != qp->sq_next) {
		struct sv_swqe *w = sq_at(qp, qp->sq_head);
		if (psn_diff(w->psn, psn) >= 0)
			return w->psn == psn ? 0 : -1;
		if (w->opcode == IBV_WR_RDMA_READ || w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
		    w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
			return -1; /* its response was lost: the timer resends it */
		sq_complete_head(qp);
	}
	return -1;
}

static void retransmit(struct sv_qp *qp)
{
	count(C_RETRANSMITS);
	for (uint32_t i = qp->sq_head; i != qp->sq_next; i++)
		sq_send_one(qp, sq_at(qp, i));
	arm_timer(qp);
}

static enum ibv_wc_status syn_status(uint16_t syn)
{
	switch (syn) {
	case SYN_ACCESS:
		return IBV_WC_REM_ACCESS_ERR;
	case SYN_INV:
		return IBV_WC_REM_INV_REQ_ERR;
	default:
		return IBV_WC_REM_OP_ERR;
	}
}

static const uint32_t rnr_us[32] = {
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560,
	3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840,
	245760, 327680, 491520};

static void on_response(struct sv_qp *qp, struct sv_pkt *h, unsigned char *data)
{
	if (qp->qp.state != IBV_QPS_RTS)
		return;
	switch (h->op) {
	case OP_ACK:
		sq_ack_before(qp, (h->psn + 1) & SV_PSN_MASK);
		break;
	case OP_NAK:
		if (h->syndrome == SYN_SEQ) {
			if (!qp->rnr_until && sq_ack_before(qp, h->psn) == 0)
				retransmit(qp);
			break;
		}
		if (sq_ack_before(qp, h->psn))
			break;
		if (h->syndrome == SYN_RNR) {
			if (qp->rnr_left == 0) {
				sq_fail_head(qp, IBV_WC_RNR_RETRY_EXC_ERR);
				break;
			}
			if (qp->rnr_left != 7)
				qp->rnr_left--;
			qp->rnr_until = now_ns() + 1000ull * rnr_us[h->imm & 31];
			qp->deadline = 0;
			break;
		}
		sq_fail_head(qp, syn_status(h->syndrome));
		break;
	case OP_READ_RESP: {
		if (sq_ack_before(qp, h->psn))
			break;
		struct sv_swqe *w = sq_at(qp, qp->sq_head);
		if (w->opcode != IBV_WR_RDMA_READ || h->off != w->rd_got ||
		    h->frag > w->len - w->rd_got)
			break; /* a fragment was lost: the timer resends the request */
		if (sge_copy(qp->ctx, qp->qp.pd, w->sge, w->nsge, h->off, data, h->frag, 1)) {
			sq_fail_head(qp, IBV_WC_LOC_PROT_ERR);
			break;
		}
		w->rd_got += h->frag;
		if (w->rd_got == w->len)
			sq_complete_head(qp);
		break;
	}
	case OP_ATOMIC_RESP: {
		if (sq_ack_before(qp, h->psn))
			break;
		struct sv_swqe *w = sq_at(qp, qp->sq_head);
		if (w->opcode != IBV_WR_ATOMIC_CMP_AND_SWP && w->opcode != IBV_WR_ATOMIC_FETCH_AND_ADD)
			break;
		uint64_t v = h->cmp_add;
		if (sge_copy(qp->ctx, qp->qp.pd, w->sge, 1, 0, (unsigned char *)&v, 8, 1)) {
			sq_fail_head(qp, IBV_WC_LOC_PROT_ERR);
			break;
		}
		sq_complete_head(qp);
		break;
	}
	}
	sv_sq_pump(qp);
}

/* The retry clock.  On an HCA the responder is hardware that answers whatever its host is
 * doing; here it is the device thread of another process, which an overloaded machine may
 * leave unscheduled for seconds (or a SIGSTOP for longer).  Such a responder is late, not
 * gone, so a timeout counts against retry_cnt only when the responder has taken everything
 * this queue pair sent and still did not answer.  It has not while
 *  - our datagrams wait unread in its socket: SIOCOUTQ on a unix datagram socket is the
 *    bytes it sent that the receiver has not read yet (they stay charged to the sender until
 *    read), and only a socket that is still open holds them: a process that exits or
 *    destroys the queue pair closes it, which discards them;
 *  - our packets wait in this queue pair's transmit queue because its socket had no room
 *    (the same state one step earlier);
 *  - or its answers wait unread in our own socket (our device thread is the late one).
 * Then the attempt is not charged and nothing is resent (the packets are there already):
 * the timer starts again.  A peer that is gone (its process died, its queue pair was
 * destroyed or is in error), a wrong address and an unreachable link (fault injection) all
 * leave nothing unread, so they still end in retry-exceeded after 1 + retry_cnt timeouts.
 * A responder that stays behind for longer than SOFTVERBS_LATE_LIMIT_MS (a process stopped
 * for good) is charged again, so that every request still ends within that limit plus the
 * queue pair's own retry budget. */
static int responder_behind(struct sv_qp *qp)
{
	int n = 0;
	if (qp->tx_head)
		return 1;
	if (ioctl(qp->fd, SIOCOUTQ, &n) == 0 && n > 0)
		return 1;
	n = 0;
	return ioctl(qp->fd, SIOCINQ, &n) == 0 && n > 0;
}

static void qp_timers(struct sv_qp *qp, uint64_t now)
{
	if (qp->qp.state != IBV_QPS_RTS || qp->sq_head == qp->sq_next)
		return;
	if (qp->rnr_until) {
		if (now >= qp->rnr_until) {
			qp->rnr_until = 0;
			retransmit(qp);
		}
		return;
	}
	if (!qp->deadline || now < qp->deadline)
		return;
	if (responder_behind(qp)) {
		if (!qp->late_since)
			qp->late_since = now;
		if (now - qp->late_since < qp->ctx->cfg->late_limit_ns) {
			count(C_LATE);
			arm_timer(qp);
			return;
		}
	} else {
		qp->late_since = 0;
	}
	if (qp->retry_left <= 0) {
		sq_fail_head(qp, IBV_WC_RETRY_EXC_ERR);
		return;
	}
	qp->retry_left--;
	retransmit(qp);
}

/* ------------------------------------------------------------------------------------ */
/* Responder                                                                            */

static void respond(struct sv_qp *qp, uint8_t op, uint32_t psn, uint16_t syn)
{
	struct sv_pkt h;
	memset(&h, 0, sizeof(h));
	h.op = op;
	h.psn = psn;
	h.syndrome = syn;
	if (syn == SYN_RNR)
		h.imm = qp->attr.min_rnr_timer;
	tx(qp, &h, NULL, 0);
}

/* A protection or request error: NAK it, and the responder's QP enters the error state. */
static void responder_fail(struct sv_qp *qp, uint32_t psn, uint16_t syn)
{
	respond(qp, OP_NAK, psn, syn);
	tx_flush(qp);
	sv_qp_to_error(qp);
}

static int take_rkey_fault(struct sv_config *cfg)
{
	long d = __atomic_load_n(&cfg->rkey_faults, __ATOMIC_RELAXED);
	while (d > 0)
		if (__atomic_compare_exchange_n(&cfg->rkey_faults, &d, d - 1, 0, __ATOMIC_RELAXED,
						__ATOMIC_RELAXED))
			return 1;
	return 0;
}

static unsigned char *remote_target(struct sv_qp *qp, struct sv_pkt *h, unsigned need)
{
	if (!(qp->attr.qp_access_flags & need) || take_rkey_fault(qp->ctx->cfg))
		return NULL;
	return mr_translate(qp->ctx, qp->qp.pd, h->rkey, h->raddr, h->len, need);
}

/* Sends the response of READ `req` from `src`, staged through the context's txbuf (the
 * device thread holds the context's lock) so that every aligned element of the watched
 * source is read by one load. */
static void send_read_response(struct sv_qp *qp, struct sv_pkt *req, unsigned char *src)
{
	struct sv_pkt h;
	memset(&h, 0, sizeof(h));
	h.op = OP_READ_RESP;
	h.psn = req->psn;
	uint32_t off = 0;
	do {
		uint32_t n = req->len - off > SV_FRAG ? SV_FRAG : req->len - off;
		h.off = off;
		h.flags = off + n == req->len ? F_LAST : 0;
		sv_load_once(qp->ctx->txbuf, src + off, n);
		tx(qp, &h, qp->ctx->txbuf, n);
		off += n;
	} while (off < req->len);
}

static void recv_cqe(struct sv_qp *qp, struct sv_pkt *h, enum ibv_wc_opcode op)
{
	struct sv_rwqe *r = &qp->rq[qp->rq_head % qp->cap.max_recv_wr];
	struct ibv_wc wc;
	memset(&wc, 0, sizeof(wc));
	wc.wr_id = r->wr_id;
	wc.status = IBV_WC_SUCCESS;
	wc.opcode = op;
	wc.byte_len = h->len;
	wc.qp_num = qp->qp.qp_num;
	wc.src_qp = h->src_qpn;
	wc.slid = h->src_lid;
	if (h->flags & F_IMM) {
		wc.wc_flags = IBV_WC_WITH_IMM;
		wc.imm_data = h->imm;
	}
	if (h->flags & F_GRH)
		wc.wc_flags |= IBV_WC_GRH;
	qp->rq_head++;
	cq_push(qp->qp.recv_cq, &wc);
}

static void on_request(struct sv_qp *qp, struct sv_pkt *h, unsigned char *data)
{
	if (qp->qp.state != IBV_QPS_RTR && qp->qp.state != IBV_QPS_RTS)
		return;
	int32_t d = psn_diff(h->psn, qp->epsn);
	if (d > 0) { /* a gap: something before was lost */
		if (qp->nak_psn != qp->epsn + 1) {
			qp->nak_psn = qp->epsn + 1;
			count(C_SEQ_NAKS);
			respond(qp, OP_NAK, qp->epsn, SYN_SEQ);
		}
		return;
	}
	if (d < 0) { /* a duplicate: answer without executing again */
		count(C_DUPLICATES);
		if (h->op == OP_READ_REQ) {
			unsigned char *src = remote_target(qp, h, IBV_ACCESS_REMOTE_READ);
			if (src)
				send_read_response(qp, h, src);
		} else if (h->op == OP_CMP_SWAP || h->op == OP_FETCH_ADD) {
			for (int i = 0; i < SV_ATOMIC_CACHE; i++)
				if (qp->acache[i].valid && qp->acache[i].psn == h->psn) {
					struct sv_pkt r;
					memset(&r, 0, sizeof(r));
					r.op = OP_ATOMIC_RESP;
					r.psn = h->psn;
					r.cmp_add = qp->acache[i].val;
					tx(qp, &r, NULL, 0);
				}
		} else if (h->flags & F_LAST) {
			respond(qp, OP_ACK, h->psn, 0);
		}
		return;
	}
	qp->nak_psn = 0;
	switch (h->op) {
	case OP_WRITE:
	case OP_SEND: {
		if (h->off != qp->rx_off)
			return; /* a fragment of this message was lost: wait for the resend */
		int is_send = h->op == OP_SEND;
		if (h->off == 0 && (is_send || (h->flags & F_IMM)) && qp->rq_head == qp->rq_tail) {
			count(C_RNR_NAKS);
			respond(qp, OP_NAK, h->psn, SYN_RNR);
			return;
		}
		if (is_send) {
			struct sv_rwqe *r = &qp->rq[qp->rq_head % qp->cap.max_recv_wr];
			uint64_t room = 0;
			for (int i = 0; i < r->nsge; i++)
				room += r->sge[i].length;
			if (h->len > room) {
				responder_fail(qp, h->psn, SYN_INV);
				return;
			}
			if (sge_copy(qp->ctx, qp->qp.pd, r->sge, r->nsge, h->off, data, h->frag, 1)) {
				responder_fail(qp, h->psn, SYN_OP);
				return;
			}
		} else {
			unsigned char *dst = remote_target(qp, h, IBV_ACCESS_REMOTE_WRITE);
			if (!dst || h->off + h->frag > h->len) {
				responder_fail(qp, h->psn, SYN_ACCESS);
				return;
			}
			sv_store_once(dst + h->off, data, h->frag);
		}
		qp->rx_off += h->frag;
		if (!(h->flags & F_LAST))
			return;
		qp->rx_off = 0;
		if (is_send)
			recv_cqe(qp, h, IBV_WC_RECV);
		else if (h->flags & F_IMM)
			recv_cqe(qp, h, IBV_WC_RECV_RDMA_WITH_IMM);
		qp->epsn = (qp->epsn + 1) & SV_PSN_MASK;
		respond(qp, OP_ACK, h->psn, 0);
		return;
	}
	case OP_READ_REQ: {
		unsigned char *src = remote_target(qp, h, IBV_ACCESS_REMOTE_READ);
		if (!src) {
			responder_fail(qp, h->psn, SYN_ACCESS);
			return;
		}
		qp->epsn = (qp->epsn + 1) & SV_PSN_MASK;
		send_read_response(qp, h, src);
		return;
	}
	case OP_CMP_SWAP:
	case OP_FETCH_ADD: {
		if (h->raddr % 8) {
			responder_fail(qp, h->psn, SYN_INV);
			return;
		}
		uint64_t *p = (uint64_t *)remote_target(qp, h, IBV_ACCESS_REMOTE_ATOMIC);
		if (!p) {
			responder_fail(qp, h->psn, SYN_ACCESS);
			return;
		}
		uint64_t old;
		if (h->op == OP_FETCH_ADD)
			old = __atomic_fetch_add(p, h->cmp_add, __ATOMIC_SEQ_CST);
		else {
			old = h->cmp_add;
			__atomic_compare_exchange_n(p, &old, h->swap, 0, __ATOMIC_SEQ_CST,
						    __ATOMIC_SEQ_CST);
		}
		unsigned slot = qp->acache_next++ % SV_ATOMIC_CACHE;
		qp->acache[slot].psn = h->psn;
		qp->acache[slot].val = old;
		qp->acache[slot].valid = 1;
		qp->epsn = (qp->epsn + 1) & SV_PSN_MASK;
		struct sv_pkt r;
		memset(&r, 0, sizeof(r));
		r.op = OP_ATOMIC_RESP;
		r.psn = h->psn;
		r.cmp_add = old;
		tx(qp, &r, NULL, 0);
		return;
	}
	}
}

/* Drops packets not meant for this QP's connection (a wrong LID, GID or QPN is silence on
 * a real fabric: the requester then retries until retry-exceeded). */
static int addressed_here(struct sv_qp *qp, struct sv_pkt *h)
{
	if (h->magic != SV_MAGIC || h->dst_qpn != qp->qp.qp_num || h->dst_lid != qp->ctx->cfg->lid)
		return 0;
	if ((h->flags & F_GRH) && !sv_gid_is_mine(qp->ctx->cfg, h->dst_gid))
		return 0;
	if (qp->qp.state != IBV_QPS_RTR && qp->qp.state != IBV_QPS_RTS)
		return 0;
	if (h->src_qpn != qp->attr.dest_qp_num)
		return 0;
	if (qp->attr.ah_attr.is_global)
		return !memcmp(h->src_gid, qp->attr.ah_attr.grh.dgid.raw, 16);
	return h->src_lid == qp->attr.ah_attr.dlid;
}

static void on_packet(struct sv_qp *qp, unsigned char *buf, size_t n)
{
	struct sv_pkt h;
	if (n < sizeof(h))
		return;
	memcpy(&h, buf, sizeof(h));
	if (n != sizeof(h) + h.frag || !addressed_here(qp, &h))
		return;
	unsigned char *data = buf + sizeof(h);
	if (h.op >= OP_ACK)
		on_response(qp, &h, data);
	else
		on_request(qp, &h, data);
}

/* ------------------------------------------------------------------------------------ */
/* The device thread                                                                    */

static struct sv_qp *find_qp(struct sv_ctx *ctx, uint32_t qpn)
{
	for (struct sv_qp *qp = ctx->qps; qp; qp = qp->next)
		if (qp->qp.qp_num == qpn)
			return qp;
	return NULL;
}

void *sv_device_thread(void *arg)
{
	struct sv_ctx *ctx = arg;
	int timeout = -1;
	for (;;) {
		struct epoll_event ev[16];
		int n = epoll_wait(ctx->ep, ev, 16, timeout);
		pthread_mutex_lock(&ctx->lk);
		if (ctx->stop) {
			pthread_mutex_unlock(&ctx->lk);
			return NULL;
		}
		for (int i = 0; i < n; i++) {
			if (ev[i].data.u64 == SV_WAKE_KEY) {
				uint64_t v;
				if (read(ctx->wake, &v, sizeof(v)) < 0) {
					/* nothing to read: another wake-up consumed it */
				}
				continue;
			}
			struct sv_qp *qp = find_qp(ctx, (uint32_t)ev[i].data.u64);
			for (int k = 0; qp && k < 64; k++) {
				ssize_t got = recv(qp->fd, ctx->rxbuf, sizeof(ctx->rxbuf), MSG_DONTWAIT);
				if (got < 0)
					break;
				on_packet(qp, ctx->rxbuf, (size_t)got);
				qp = find_qp(ctx, (uint32_t)ev[i].data.u64);
			}
		}
		uint64_t now = now_ns();
		timeout = -1;
		for (struct sv_qp *qp = ctx->qps; qp; qp = qp->next) {
			tx_flush(qp);
			qp_timers(qp, now);
			if (qp->tx_head || (qp->qp.state == IBV_QPS_RTS && qp->sq_head != qp->sq_next))
				timeout = 1;
		}
		pthread_mutex_unlock(&ctx->lk);
	}
}

/* ------------------------------------------------------------------------------------ */
/* Verbs: posting                                                                       */

int sv_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct sv_qp *qp = (struct sv_qp *)ibqp;
	struct sv_ctx *ctx = qp->ctx;
	int rc = 0;
	pthread_mutex_lock(&ctx->lk);
	for (; wr; wr = wr->next) {
		enum ibv_qp_state st = qp->qp.state;
		if (st != IBV_QPS_RTS && st != IBV_QPS_ERR) {
			rc = EINVAL;
			break;
		}
		if (wr->num_sge < 0 || wr->num_sge > (int)qp->cap.max_send_sge) {
			rc = EINVAL;
			break;
		}
		if (qp->sq_tail - qp->sq_head >= qp->cap.max_send_wr) {
			rc = ENOMEM;
			break;
		}
		uint64_t len = 0;
		for (int i = 0; i < wr->num_sge; i++)
			len += wr->sg_list[i].length;
		int inl = (wr->send_flags & IBV_SEND_INLINE) &&
			  (wr->opcode == IBV_WR_RDMA_WRITE || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
			   wr->opcode == IBV_WR_SEND || wr->opcode == IBV_WR_SEND_WITH_IMM);
		if (len > UINT32_MAX || (inl && len > qp->cap.max_inline_data)) {
			rc = EINVAL;
			break;
		}
		struct sv_swqe *w = sq_at(qp, qp->sq_tail);
		uint8_t *keep = w->inl;
		memset(w, 0, sizeof(*w));
		w->inl = NULL;
		w->wr_id = wr->wr_id;
		w->opcode = wr->opcode;
		w->flags = wr->send_flags;
		w->len = (uint32_t)len;
		w->nsge = wr->num_sge;
		if (wr->num_sge)
			memcpy(w->sge, wr->sg_list, sizeof(struct ibv_sge) * (size_t)wr->num_sge);
		w->imm = wr->imm_data;
		if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			w->raddr = wr->wr.atomic.remote_addr;
			w->rkey = wr->wr.atomic.rkey;
			w->cmp_add = wr->wr.atomic.compare_add;
			w->swap = wr->wr.atomic.swap;
		} else {
			w->raddr = wr->wr.rdma.remote_addr;
			w->rkey = wr->wr.rdma.rkey;
		}
		if (inl) {
			/* The data is taken now: the caller may reuse its buffer at return. */
			w->inl = keep ? keep : malloc(SV_MAX_INLINE);
			if (!w->inl) {
				rc = ENOMEM;
				break;
			}
			uint32_t o = 0;
			for (int i = 0; i < wr->num_sge; i++) {
				memcpy(w->inl + o, (void *)(uintptr_t)wr->sg_list[i].addr,
				       wr->sg_list[i].length);
				o += wr->sg_list[i].length;
			}
		} else {
			free(keep);
		}
		w->psn = qp->next_psn;
		qp->next_psn = (qp->next_psn + 1) & SV_PSN_MASK;
		qp->sq_tail++;
	}
	if (qp->qp.state == IBV_QPS_ERR)
		sv_qp_to_error(qp); /* work posted to a QP in error is flushed */
	else
		sv_sq_pump(qp);
	int busy = qp->sq_head != qp->sq_next || qp->tx_head;
	pthread_mutex_unlock(&ctx->lk);
	if (busy) {
		/* The device thread must run the retransmission timer. */
		uint64_t one = 1;
		if (write(ctx->wake, &one, sizeof(one)) < 0) {
			/* saturated counter: the thread is awake anyway */
		}
	}
	if (rc && bad)
		*bad = wr;
	return rc;
}

int sv_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct sv_qp *qp = (struct sv_qp *)ibqp;
	int rc = 0;
	pthread_mutex_lock(&qp->ctx->lk);
	for (; wr; wr = wr->next) {
		if (qp->qp.state == IBV_QPS_RESET) {
			rc = EINVAL;
			break;
		}
		if (wr->num_sge < 0 || wr->num_sge > (int)qp->cap.max_recv_sge) {
			rc = EINVAL;
			break;
		}
		if (qp->rq_tail - qp->rq_head >= qp->cap.max_recv_wr) {
			rc = ENOMEM;
			break;
		}
		struct sv_rwqe *r = &qp->rq[qp->rq_tail % qp->cap.max_recv_wr];
		r->wr_id = wr->wr_id;
		r->nsge = wr->num_sge;
		if (wr->num_sge)
			memcpy(r->sge, wr->sg_list, sizeof(struct ibv_sge) * (size_t)wr->num_sge);
		qp->rq_tail++;
	}
	if (qp->qp.state == IBV_QPS_ERR)
		sv_qp_to_error(qp);
	pthread_mutex_unlock(&qp->ctx->lk);
	if (rc && bad)
		*bad = wr;
	return rc;
}

