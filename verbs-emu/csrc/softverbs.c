/* Over 1,000 lines: one C translation unit is the whole device (a shared object with one ABI).
 *
 * softverbs: a software RDMA device behind the libibverbs ABI.
 *
 * Built as `libibverbs.so.1` against the system's <infiniband/verbs.h> (so every structure
 * the application touches has the real layout), it is loaded instead of rdma-core's library
 * (LD_LIBRARY_PATH) by any binding that links or dlopens libibverbs.so.1.  It fills the
 * context's operation table (post_send, post_recv, poll_cq) so that the inline verbs of the
 * header work unchanged, and the extended context (query_port, query_device_ex).
 *
 * What it emulates: reliable-connected (RC) queue pairs between processes on one machine.
 * Every queue pair owns a unix datagram socket `<dir>/qp-<qpn>`; a device thread per opened
 * context receives requests and executes them on this process's memory (RDMA WRITE, READ,
 * SEND/RECV, 64-bit fetch-add and compare-swap), so the initiator's memory is reached with
 * no call from the target's application, as on an HCA.  Per queue pair, messages carry
 * PSNs; the responder executes them in order, acknowledges them, answers duplicates without
 * executing twice (atomics from a result cache), NAKs sequence gaps, missing receives (RNR)
 * and protection errors.  The requester retransmits go-back-N after the QP's timeout and
 * fails with retry-exceeded after retry_cnt retransmissions.  Errors move the QP to the
 * error state and flush its outstanding work.
 *
 * Configuration (environment, read once):
 *   SOFTVERBS_DEVICE   device name (default softverbs0)
 *   SOFTVERBS_LID      the port's LID (default 1); the node's identity
 *   SOFTVERBS_GID      the port's GID 0 as an IPv6 address (default fe80::<lid>)
 *   SOFTVERBS_DIR      the rendezvous directory of the sockets (default /tmp/softverbs-<uid>)
 *   SOFTVERBS_ATOMIC   none|hca|glob: the atomic capability reported (default glob)
 *   SOFTVERBS_MIN_TIMEOUT_MS  lower bound of the retransmission timeout (default 50)
 *   SOFTVERBS_FAULTS   comma-separated faults of this process's device:
 *                      drop=N        the next N packets it sends vanish
 *                      drop-every=K  every K-th packet it sends vanishes
 *                      rkey=N        the next N remote accesses it serves fail (bad key)
 *                      unreachable   everything it sends vanishes (a dead link)
 *                      delay-us=U    every packet it sends waits U microseconds first
 *
 * Thread safety: each context has one lock over its PDs, MRs, QPs and their queues, taken by
 * the posting verbs and the device thread; each CQ has its own lock (poll_cq takes only it).
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define SV_EXPORT __attribute__((visibility("default")))

#define SV_MAGIC 0x53565231u /* "SVR1" */
#define SV_FRAG 32768u       /* payload bytes per datagram */
#define SV_MAX_SGE 16
#define SV_MAX_INLINE 512
#define SV_MAX_WR 4096
#define SV_MAX_CQE 65536
#define SV_ATOMIC_CACHE 32
#define SV_PSN_MASK 0xffffffu
#define SV_WAKE_KEY UINT64_MAX

/* ------------------------------------------------------------------------------------ */
/* Configuration                                                                        */

struct sv_config {
	char name[IBV_SYSFS_NAME_MAX];
	char dir[80];
	uint16_t lid;
	union ibv_gid gid;
	enum ibv_atomic_cap atomic_cap;
	uint64_t min_timeout_ns;
	/* faults: counters shared by every context of the process (atomic updates) */
	long drop_next;
	long drop_every;
	long rkey_faults;
	int unreachable;
	long delay_us;
	unsigned long sent; /* packets offered to the link, for drop-every */
};

/* Process-wide counters (atomic updates), read by softverbs_counters(). */
enum { C_SENT, C_DROPPED, C_RETRANSMITS, C_DUPLICATES, C_SEQ_NAKS, C_RNR_NAKS, C_COUNT };
static uint64_t counters[C_COUNT];

static void count(int which)
{
	__atomic_add_fetch(&counters[which], 1, __ATOMIC_RELAXED);
}

static struct sv_config cfg;
static int cfg_state; /* 0 unread, 1 good, -1 bad */
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static struct ibv_device sv_dev;

static void sv_warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("softverbs: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static int parse_long(const char *s, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 0);
	if (errno || end == s || *end || v < 0)
		return -1;
	*out = v;
	return 0;
}

static int parse_faults(const char *spec)
{
	char buf[256];
	if (strlen(spec) >= sizeof(buf)) {
		sv_warn("SOFTVERBS_FAULTS too long");
		return -1;
	}
	strcpy(buf, spec);
	for (char *save = NULL, *item = strtok_r(buf, ",", &save); item;
	     item = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(item, '=');
		if (eq)
			*eq++ = 0;
		long v = 0;
		if (!strcmp(item, "unreachable") && !eq) {
			cfg.unreachable = 1;
			continue;
		}
		if (!eq || parse_long(eq, &v)) {
			sv_warn("SOFTVERBS_FAULTS: bad item '%s' (expected drop=N, drop-every=K, "
				"rkey=N, unreachable, delay-us=U)", item);
			return -1;
		}
		if (!strcmp(item, "drop"))
			cfg.drop_next = v;
		else if (!strcmp(item, "drop-every") && v > 0)
			cfg.drop_every = v;
		else if (!strcmp(item, "rkey"))
			cfg.rkey_faults = v;
		else if (!strcmp(item, "delay-us"))
			cfg.delay_us = v;
		else {
			sv_warn("SOFTVERBS_FAULTS: unknown fault '%s'", item);
			return -1;
		}
	}
	return 0;
}

static void load_config(void)
{
	const char *s;
	long v;
	snprintf(cfg.name, sizeof(cfg.name), "%s",
		 (s = getenv("SOFTVERBS_DEVICE")) && *s ? s : "softverbs0");
	cfg.lid = 1;
	if ((s = getenv("SOFTVERBS_LID")) && *s) {
		if (parse_long(s, &v) || v < 1 || v > 0xbfff) {
			sv_warn("SOFTVERBS_LID='%s': expected a unicast LID 1..49151", s);
			goto bad;
		}
		cfg.lid = (uint16_t)v;
	}
	memset(&cfg.gid, 0, sizeof(cfg.gid));
	if ((s = getenv("SOFTVERBS_GID")) && *s) {
		if (inet_pton(AF_INET6, s, cfg.gid.raw) != 1) {
			sv_warn("SOFTVERBS_GID='%s': expected an IPv6 address", s);
			goto bad;
		}
	} else {
		cfg.gid.raw[0] = 0xfe;
		cfg.gid.raw[1] = 0x80;
		cfg.gid.raw[14] = (uint8_t)(cfg.lid >> 8);
		cfg.gid.raw[15] = (uint8_t)cfg.lid;
	}
	if ((s = getenv("SOFTVERBS_DIR")) && *s)
		snprintf(cfg.dir, sizeof(cfg.dir), "%s", s);
	else
		snprintf(cfg.dir, sizeof(cfg.dir), "/tmp/softverbs-%u", (unsigned)getuid());
	if (strlen(cfg.dir) > 70) {
		sv_warn("SOFTVERBS_DIR='%s' is too long for a socket path (70 bytes at most)", cfg.dir);
		goto bad;
	}
	if (mkdir(cfg.dir, 0700) && errno != EEXIST) {
		sv_warn("cannot create %s: %s", cfg.dir, strerror(errno));
		goto bad;
	}
	cfg.atomic_cap = IBV_ATOMIC_GLOB;
	if ((s = getenv("SOFTVERBS_ATOMIC")) && *s) {
		if (!strcmp(s, "none"))
			cfg.atomic_cap = IBV_ATOMIC_NONE;
		else if (!strcmp(s, "hca"))
			cfg.atomic_cap = IBV_ATOMIC_HCA;
		else if (!strcmp(s, "glob"))
			cfg.atomic_cap = IBV_ATOMIC_GLOB;
		else {
			sv_warn("SOFTVERBS_ATOMIC='%s': expected none, hca or glob", s);
			goto bad;
		}
	}
	cfg.min_timeout_ns = 50 * 1000000ull;
	if ((s = getenv("SOFTVERBS_MIN_TIMEOUT_MS")) && *s) {
		if (parse_long(s, &v)) {
			sv_warn("SOFTVERBS_MIN_TIMEOUT_MS='%s': expected milliseconds", s);
			goto bad;
		}
		cfg.min_timeout_ns = (uint64_t)v * 1000000ull;
	}
	if ((s = getenv("SOFTVERBS_FAULTS")) && *s && parse_faults(s))
		goto bad;

	snprintf(sv_dev.name, sizeof(sv_dev.name), "%s", cfg.name);
	snprintf(sv_dev.dev_name, sizeof(sv_dev.dev_name), "uverbs0");
	snprintf(sv_dev.dev_path, sizeof(sv_dev.dev_path), "%s", cfg.dir);
	snprintf(sv_dev.ibdev_path, sizeof(sv_dev.ibdev_path), "%s", cfg.dir);
	sv_dev.node_type = IBV_NODE_CA;
	sv_dev.transport_type = IBV_TRANSPORT_IB;
	cfg_state = 1;
	return;
bad:
	cfg_state = -1;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------------------------ */
/* Objects                                                                              */

struct sv_cq {
	struct ibv_cq cq; /* first: the application's handle */
	pthread_mutex_t lk;
	struct ibv_wc *ring;
	uint32_t cap, head, count;
	int overrun;
};

struct sv_mr {
	struct ibv_mr mr; /* first */
	uint64_t iova;
	unsigned access;
};

struct sv_swqe {
	uint64_t wr_id;
	enum ibv_wr_opcode opcode;
	unsigned flags;
	uint32_t psn;
	int nsge;
	struct ibv_sge sge[SV_MAX_SGE];
	uint32_t len;
	uint64_t raddr;
	uint32_t rkey;
	uint32_t imm;
	uint64_t cmp_add, swap;
	uint32_t rd_got; /* READ: bytes of the response received so far */
	enum ibv_wc_status lerr; /* a local error found when it was to be sent */
	uint8_t *inl;
};

struct sv_rwqe {
	uint64_t wr_id;
	int nsge;
	struct ibv_sge sge[SV_MAX_SGE];
};

struct sv_tx {
	struct sv_tx *next;
	size_t len;
	unsigned char data[];
};

struct sv_qp {
	struct ibv_qp qp; /* first */
	struct sv_qp *next;
	struct sv_ctx *ctx;
	int fd;
	char path[108];
	int sq_sig_all;
	struct ibv_qp_cap cap;
	struct ibv_qp_attr attr; /* as last set by modify_qp */
	/* send queue: [sq_head, sq_next) sent and not completed, [sq_next, sq_tail) queued */
	struct sv_swqe *sq;
	uint32_t sq_head, sq_next, sq_tail; /* free-running, index % cap.max_send_wr */
	uint32_t next_psn;                 /* PSN of the next new WR */
	uint64_t deadline;                 /* retransmission deadline, 0 when idle */
	uint64_t rnr_until;                /* RNR wait before the next retransmission */
	int retry_left, rnr_left;
	/* receive queue */
	struct sv_rwqe *rq;
	uint32_t rq_head, rq_tail;
	/* responder */
	uint32_t epsn;    /* next expected request PSN */
	uint32_t rx_off;  /* bytes of the current request message received */
	uint32_t nak_psn; /* PSN a sequence NAK was last sent for (+1; 0: none) */
	struct {
		uint32_t psn;
		uint64_t val;
		int valid;
	} acache[SV_ATOMIC_CACHE];
	unsigned acache_next;
	struct sockaddr_un peer;
	socklen_t peer_len;
	struct sv_tx *tx_head, *tx_tail; /* packets the socket did not take yet */
};

struct sv_ctx {
	struct verbs_context vctx; /* ends with the application's struct ibv_context */
	pthread_mutex_t lk;
	struct sv_qp *qps;
	struct sv_mr **mrs;
	uint32_t *mr_gen;
	uint32_t nmrs;
	int ep, wake;
	pthread_t thread;
	int stop;
	unsigned char rxbuf[sizeof(uint64_t) * 16 + 256 + SV_FRAG];
	unsigned char txbuf[256 + SV_FRAG];
};

struct sv_pkt {
	uint32_t magic;
	uint8_t op, flags;
	uint16_t syndrome;
	uint32_t src_qpn, dst_qpn, psn;
	uint16_t src_lid, dst_lid;
	uint32_t imm;
	uint8_t src_gid[16], dst_gid[16];
	uint64_t raddr;
	uint32_t rkey, len, off, frag;
	uint64_t cmp_add, swap;
};

enum { OP_WRITE = 1, OP_SEND, OP_READ_REQ, OP_CMP_SWAP, OP_FETCH_ADD,
       OP_ACK, OP_NAK, OP_READ_RESP, OP_ATOMIC_RESP };
enum { F_IMM = 1, F_LAST = 2, F_GRH = 4 };
enum { SYN_RNR = 1, SYN_SEQ, SYN_ACCESS, SYN_INV, SYN_OP };

static struct sv_ctx *to_ctx(struct ibv_context *c)
{
	return (struct sv_ctx *)((char *)c - offsetof(struct sv_ctx, vctx.context));
}

static int32_t psn_diff(uint32_t a, uint32_t b)
{
	return (int32_t)((a - b) << 8) >> 8;
}

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
	}
	pthread_mutex_unlock(&cq->lk);
}

static int sv_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
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

static int sv_req_notify_cq(struct ibv_cq *cq, int solicited_only)
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
static void qp_to_error(struct sv_qp *qp)
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
	qp_to_error(qp);
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
			memcpy(p, buf, k);
		else
			memcpy(buf, p, k);
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

static int fault_drop(void)
{
	if (__atomic_load_n(&cfg.unreachable, __ATOMIC_RELAXED))
		return 1;
	unsigned long n = __atomic_add_fetch(&cfg.sent, 1, __ATOMIC_RELAXED);
	if (cfg.drop_every && n % (unsigned long)cfg.drop_every == 0)
		return 1;
	long d = __atomic_load_n(&cfg.drop_next, __ATOMIC_RELAXED);
	while (d > 0) {
		if (__atomic_compare_exchange_n(&cfg.drop_next, &d, d - 1, 0, __ATOMIC_RELAXED,
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
	h->magic = SV_MAGIC;
	h->src_qpn = qp->qp.qp_num;
	h->dst_qpn = qp->attr.dest_qp_num;
	h->src_lid = cfg.lid;
	h->dst_lid = qp->attr.ah_attr.dlid;
	memcpy(h->src_gid, cfg.gid.raw, 16);
	if (qp->attr.ah_attr.is_global) {
		h->flags |= F_GRH;
		memcpy(h->dst_gid, qp->attr.ah_attr.grh.dgid.raw, 16);
	}
	h->frag = n;
	if (cfg.delay_us)
		usleep((useconds_t)cfg.delay_us);
	count(C_SENT);
	if (fault_drop()) {
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
	return ns < cfg.min_timeout_ns ? cfg.min_timeout_ns : ns;
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
static void sq_pump(struct sv_qp *qp)
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
	sq_pump(qp);
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
	qp_to_error(qp);
}

static int take_rkey_fault(void)
{
	long d = __atomic_load_n(&cfg.rkey_faults, __ATOMIC_RELAXED);
	while (d > 0)
		if (__atomic_compare_exchange_n(&cfg.rkey_faults, &d, d - 1, 0, __ATOMIC_RELAXED,
						__ATOMIC_RELAXED))
			return 1;
	return 0;
}

static unsigned char *remote_target(struct sv_qp *qp, struct sv_pkt *h, unsigned need)
{
	if (!(qp->attr.qp_access_flags & need) || take_rkey_fault())
		return NULL;
	return mr_translate(qp->ctx, qp->qp.pd, h->rkey, h->raddr, h->len, need);
}

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
		tx(qp, &h, src + off, n);
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
			memcpy(dst + h->off, data, h->frag);
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
	if (h->magic != SV_MAGIC || h->dst_qpn != qp->qp.qp_num || h->dst_lid != cfg.lid)
		return 0;
	if ((h->flags & F_GRH) && memcmp(h->dst_gid, cfg.gid.raw, 16))
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

static void *device_thread(void *arg)
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

static int sv_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
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
		qp_to_error(qp); /* work posted to a QP in error is flushed */
	else
		sq_pump(qp);
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

static int sv_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
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
		memcpy(r->sge, wr->sg_list, sizeof(struct ibv_sge) * (size_t)wr->num_sge);
		qp->rq_tail++;
	}
	if (qp->qp.state == IBV_QPS_ERR)
		qp_to_error(qp);
	pthread_mutex_unlock(&qp->ctx->lk);
	if (rc && bad)
		*bad = wr;
	return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Verbs: devices and contexts                                                          */

SV_EXPORT struct ibv_device **__ibv_get_device_list(int *num)
{
	pthread_once(&cfg_once, load_config);
	if (cfg_state < 0) {
		errno = EINVAL;
		if (num)
			*num = 0;
		return NULL;
	}
	struct ibv_device **l = calloc(2, sizeof(*l));
	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	l[0] = &sv_dev;
	if (num)
		*num = 1;
	return l;
}

#undef ibv_get_device_list
SV_EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
	return __ibv_get_device_list(num);
}

SV_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

SV_EXPORT const char *ibv_get_device_name(struct ibv_device *dev)
{
	return dev->name;
}

static uint64_t node_guid(void)
{
	return 0x0002c90300000000ull | cfg.lid;
}

SV_EXPORT __be64 ibv_get_device_guid(struct ibv_device *dev)
{
	(void)dev;
	return htobe64(node_guid());
}

static void fill_port_attr(struct ibv_port_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->state = IBV_PORT_ACTIVE;
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = IBV_MTU_4096;
	a->gid_tbl_len = 1;
	a->port_cap_flags = 0;
	a->max_msg_sz = 0x80000000u;
	a->pkey_tbl_len = 1;
	a->lid = cfg.lid;
	a->sm_lid = 1;
	a->max_vl_num = 1;
	a->active_width = 2;  /* 4x */
	a->active_speed = 32; /* EDR */
	a->phys_state = 5;    /* LinkUp */
	a->link_layer = IBV_LINK_LAYER_INFINIBAND;
}

static int sv_query_port_ex(struct ibv_context *c, uint8_t port, struct ibv_port_attr *attr,
			    size_t len)
{
	(void)c;
	if (port != 1)
		return EINVAL;
	struct ibv_port_attr a;
	fill_port_attr(&a);
	/* A caller built against newer headers passes a larger structure (its new fields at
	 * the end): those read as zero, "not reported". */
	memset(attr, 0, len);
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

#undef ibv_query_port
SV_EXPORT int ibv_query_port(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *attr)
{
	/* The compat structure is the prefix of struct ibv_port_attr up to link_layer. */
	return sv_query_port_ex(c, port, (struct ibv_port_attr *)attr,
				offsetof(struct ibv_port_attr, link_layer) + 1);
}

static void fill_device_attr(struct ibv_device_attr *a)
{
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "softverbs-1");
	a->node_guid = htobe64(node_guid());
	a->sys_image_guid = a->node_guid;
	a->max_mr_size = UINT64_MAX;
	a->page_size_cap = 4096;
	a->vendor_id = 0;
	a->max_qp = 4096;
	a->max_qp_wr = SV_MAX_WR;
	a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN;
	a->max_sge = SV_MAX_SGE;
	a->max_sge_rd = SV_MAX_SGE;
	a->max_cq = 4096;
	a->max_cqe = SV_MAX_CQE;
	a->max_mr = 1 << 20;
	a->max_pd = 1 << 16;
	a->max_qp_rd_atom = 16;
	a->max_res_rd_atom = 16 * 4096;
	a->max_qp_init_rd_atom = 16;
	a->atomic_cap = cfg.atomic_cap;
	a->max_pkeys = 1;
	a->local_ca_ack_delay = 16;
	a->phys_port_cnt = 1;
}

SV_EXPORT int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *attr)
{
	(void)c;
	fill_device_attr(attr);
	return 0;
}

static int sv_query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
			      struct ibv_device_attr_ex *attr, size_t size)
{
	(void)c;
	(void)in;
	if (size < sizeof(attr->orig_attr))
		return EINVAL;
	memset(attr, 0, size);
	fill_device_attr(&attr->orig_attr);
	return 0;
}

SV_EXPORT int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid)
{
	(void)c;
	if (port != 1 || index != 0)
		return -1;
	*gid = cfg.gid;
	return 0;
}

SV_EXPORT int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index,
				struct ibv_gid_entry *entry, uint32_t flags, size_t size)
{
	(void)c;
	(void)flags;
	if (port != 1 || index != 0)
		return ENODATA;
	if (size < sizeof(*entry))
		return EINVAL;
	memset(entry, 0, sizeof(*entry));
	entry->gid = cfg.gid;
	entry->port_num = 1;
	entry->gid_type = IBV_GID_TYPE_IB;
	return 0;
}

SV_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *c, struct ibv_gid_entry *entries,
				       size_t max, uint32_t flags, size_t size)
{
	if (max < 1)
		return -EINVAL;
	int rc = _ibv_query_gid_ex(c, 1, 0, entries, flags, size);
	return rc ? -rc : 1;
}

SV_EXPORT int ibv_query_pkey(struct ibv_context *c, uint8_t port, int index, __be16 *pkey)
{
	(void)c;
	if (port != 1 || index != 0)
		return -1;
	*pkey = htobe16(0xffff);
	return 0;
}

SV_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *dev)
{
	if (dev != &sv_dev) {
		errno = ENODEV;
		return NULL;
	}
	struct sv_ctx *ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		errno = ENOMEM;
		return NULL;
	}
	struct ibv_context *c = &ctx->vctx.context;
	ctx->vctx.sz = sizeof(struct verbs_context);
	ctx->vctx.query_port = sv_query_port_ex;
	ctx->vctx.query_device_ex = sv_query_device_ex;
	c->device = dev;
	c->ops.poll_cq = sv_poll_cq;
	c->ops.req_notify_cq = sv_req_notify_cq;
	c->ops.post_send = sv_post_send;
	c->ops.post_recv = sv_post_recv;
	c->cmd_fd = -1;
	c->num_comp_vectors = 1;
	c->abi_compat = __VERBS_ABI_IS_EXTENDED;
	pthread_mutex_init(&c->mutex, NULL);
	pthread_mutex_init(&ctx->lk, NULL);
	/* An async fd that never becomes readable: no asynchronous events are generated. */
	c->async_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ctx->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ctx->ep = epoll_create1(EPOLL_CLOEXEC);
	if (c->async_fd < 0 || ctx->wake < 0 || ctx->ep < 0)
		goto fail;
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = SV_WAKE_KEY};
	if (epoll_ctl(ctx->ep, EPOLL_CTL_ADD, ctx->wake, &ev))
		goto fail;
	int e = pthread_create(&ctx->thread, NULL, device_thread, ctx);
	if (e) {
		errno = e;
		goto fail;
	}
	return c;
fail:
	e = errno;
	if (c->async_fd >= 0)
		close(c->async_fd);
	if (ctx->wake >= 0)
		close(ctx->wake);
	if (ctx->ep >= 0)
		close(ctx->ep);
	free(ctx);
	errno = e;
	return NULL;
}

SV_EXPORT int ibv_close_device(struct ibv_context *c)
{
	struct sv_ctx *ctx = to_ctx(c);
	pthread_mutex_lock(&ctx->lk);
	ctx->stop = 1;
	pthread_mutex_unlock(&ctx->lk);
	uint64_t one = 1;
	if (write(ctx->wake, &one, sizeof(one)) < 0) {
		/* saturated: the thread wakes anyway */
	}
	pthread_join(ctx->thread, NULL);
	close(ctx->ep);
	close(ctx->wake);
	close(c->async_fd);
	free(ctx->mrs);
	free(ctx->mr_gen);
	free(ctx);
	return 0;
}

SV_EXPORT int ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *ev)
{
	(void)c;
	(void)ev;
	errno = EOPNOTSUPP;
	return -1;
}

SV_EXPORT void ibv_ack_async_event(struct ibv_async_event *ev)
{
	(void)ev;
}

SV_EXPORT int ibv_fork_init(void)
{
	return 0;
}

SV_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

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

static int bind_qp_socket(struct sv_qp *qp)
{
	struct sockaddr_un a;
	memset(&a, 0, sizeof(a));
	a.sun_family = AF_UNIX;
	/* QPNs unique per rendezvous directory: the first free one after a per-process start. */
	uint32_t start = ((uint32_t)getpid() * 2654435761u) & 0xfffff;
	for (uint32_t i = 0; i < 0x100000; i++) {
		uint32_t qpn = 0x100000 | ((start + i) & 0xfffff);
		snprintf(a.sun_path, sizeof(a.sun_path), "%s/qp-%06x", cfg.dir, qpn);
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
	if (bind_qp_socket(qp)) {
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
	qp->deadline = qp->rnr_until = 0;
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
	if ((mask & IBV_QP_PORT) && attr->port_num != 1)
		goto inval;
	if ((mask & IBV_QP_AV) && attr->ah_attr.port_num > 1)
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
		snprintf(qp->peer.sun_path, sizeof(qp->peer.sun_path), "%s/qp-%06x", cfg.dir,
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
			qp_to_error(qp);
		if (to == IBV_QPS_RTS) {
			qp->retry_left = qp->attr.retry_cnt;
			qp->rnr_left = qp->attr.rnr_retry;
			sq_pump(qp);
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

/* ------------------------------------------------------------------------------------ */
/* Strings                                                                              */

SV_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status s)
{
	static const char *const str[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
		[IBV_WC_MW_BIND_ERR] = "memory management operation error",
		[IBV_WC_BAD_RESP_ERR] = "bad response error",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "aborted error",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
		[IBV_WC_GENERAL_ERR] = "general error",
	};
	if ((unsigned)s < sizeof(str) / sizeof(str[0]) && str[s])
		return str[s];
	return "unknown";
}

SV_EXPORT const char *ibv_port_state_str(enum ibv_port_state s)
{
	static const char *const str[] = {"PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED",
					  "PORT_ACTIVE", "PORT_ACTIVE_DEFER"};
	return (unsigned)s < 6 ? str[s] : "unknown";
}

SV_EXPORT const char *ibv_node_type_str(enum ibv_node_type t)
{
	return t == IBV_NODE_CA ? "InfiniBand channel adapter" : "unknown";
}

SV_EXPORT const char *ibv_event_type_str(enum ibv_event_type e)
{
	(void)e;
	return "unknown";
}

/* The process's counters: packets sent (offered to the link), dropped by fault injection,
 * go-back-N retransmissions, duplicate requests answered, sequence NAKs, RNR NAKs.
 * Returns how many it wrote (at most n). */
SV_EXPORT size_t softverbs_counters(uint64_t *out, size_t n)
{
	size_t k = n < C_COUNT ? n : C_COUNT;
	for (size_t i = 0; i < k; i++)
		out[i] = __atomic_load_n(&counters[i], __ATOMIC_RELAXED);
	return k;
}

/* For the layout test of the Rust side: sizes and offsets this library was built with. */
SV_EXPORT size_t softverbs_sizeof(const char *what)
{
#define SZ(t)                                                                                      \
	if (!strcmp(what, #t))                                                                     \
		return sizeof(struct t);
	SZ(ibv_context)
	SZ(ibv_context_ops)
	SZ(verbs_context)
	SZ(ibv_qp)
	SZ(ibv_cq)
	SZ(ibv_mr)
	SZ(ibv_pd)
	SZ(ibv_wc)
	SZ(ibv_send_wr)
	SZ(ibv_recv_wr)
	SZ(ibv_sge)
	SZ(ibv_qp_attr)
	SZ(ibv_qp_init_attr)
	SZ(ibv_port_attr)
	SZ(ibv_device_attr)
	SZ(ibv_device)
#undef SZ
	/* verbs_context grows towards lower addresses: what must agree is each field's
	 * distance from the end (the binding compares it with `sz`). */
	if (!strcmp(what, "verbs_context.query_port.tail"))
		return sizeof(struct verbs_context) - offsetof(struct verbs_context, query_port);
	if (!strcmp(what, "verbs_context.query_device_ex.tail"))
		return sizeof(struct verbs_context) - offsetof(struct verbs_context, query_device_ex);
	if (!strcmp(what, "ibv_port_attr.port_cap_flags2"))
		return offsetof(struct ibv_port_attr, port_cap_flags2);
	if (!strcmp(what, "ibv_context.ops.post_send"))
		return offsetof(struct ibv_context, ops.post_send);
	if (!strcmp(what, "ibv_context.ops.poll_cq"))
		return offsetof(struct ibv_context, ops.poll_cq);
	return 0;
}
