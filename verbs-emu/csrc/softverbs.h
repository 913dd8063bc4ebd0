/* softverbs: the structures and internal functions shared by its files (see device.c). */
#ifndef SOFTVERBS_H
#define SOFTVERBS_H

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
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <linux/sockios.h>

#define SV_EXPORT __attribute__((visibility("default")))

#define SV_MAGIC 0x53565231u /* "SVR1" */
#define SV_FRAG 32768u       /* payload bytes per datagram */
/* A message's datagrams start at offsets k * SV_FRAG, a multiple of gsas's granule
 * (gsas_core::wire::GRANULE, 64 bytes; a real HCA cuts at the path MTU, 256..4096): an
 * aligned element is never split between two datagrams. */
_Static_assert(SV_FRAG % 64 == 0, "SV_FRAG must be a multiple of the 64-byte granule");
#define SV_MAX_SGE 16
#define SV_MAX_INLINE 512
#define SV_MAX_WR 4096
#define SV_MAX_CQE 65536
#define SV_ATOMIC_CACHE 32
#define SV_PSN_MASK 0xffffffu
#define SV_WAKE_KEY UINT64_MAX
#define SV_MAX_GIDS 4
#define SV_MAX_PORTS 8
#define SV_MAX_DEVICES 16

/* ------------------------------------------------------------------------------------ */
/* Configuration                                                                        */

/* One device's configuration (SOFTVERBS_DEVICES lists several, each an emulated node). */
struct sv_config {
	char name[IBV_SYSFS_NAME_MAX];
	char dir[80];
	uint16_t lid;
	union ibv_gid gid[SV_MAX_GIDS]; /* the active port's GID table */
	int ngids;
	uint8_t port; /* the active port; ports 1..port-1 exist and are down */
	enum ibv_atomic_cap atomic_cap;
	uint64_t min_timeout_ns;
	uint64_t late_limit_ns; /* how long a responder that does not read is forgiven */
	/* faults: counters shared by every context of the device (atomic updates) */
	long drop_next;
	long drop_every;
	long rkey_faults;
	int unreachable;
	long delay_us;
	unsigned long sent; /* packets offered to the link, for drop-every */
};

/* Process-wide counters (atomic updates), read by softverbs_counters(). C_LATE counts the
 * retransmission timeouts that were not charged to retry_cnt because the responder had not
 * yet read what this queue pair sent (see rc.c, "the retry clock"). */
enum { C_SENT, C_DROPPED, C_RETRANSMITS, C_DUPLICATES, C_SEQ_NAKS, C_RNR_NAKS, C_COMPLETIONS,
       C_LATE, C_COUNT };
extern uint64_t sv_counters[C_COUNT];

static inline void count(int which)
{
	__atomic_add_fetch(&sv_counters[which], 1, __ATOMIC_RELAXED);
}

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Copies n bytes into memory another thread may be watching (a remote WRITE, READ data
 * landing, as an HCA's DMA does it): every naturally aligned 1/2/4/8-byte element inside
 * the range is written by exactly one store, never by the overlapping stores that memcpy
 * uses for odd sizes, so an observer never sees a torn or rewritten element. */
static inline void sv_store_once(unsigned char *d, const unsigned char *s, size_t n)
{
	while (n) {
		uintptr_t a = (uintptr_t)d;
		if (n >= 8 && !(a & 7)) {
			uint64_t v;
			memcpy(&v, s, 8);
			__atomic_store_n((uint64_t *)d, v, __ATOMIC_RELAXED);
			d += 8, s += 8, n -= 8;
		} else if (n >= 4 && !(a & 3)) {
			uint32_t v;
			memcpy(&v, s, 4);
			__atomic_store_n((uint32_t *)d, v, __ATOMIC_RELAXED);
			d += 4, s += 4, n -= 4;
		} else if (n >= 2 && !(a & 1)) {
			uint16_t v;
			memcpy(&v, s, 2);
			__atomic_store_n((uint16_t *)d, v, __ATOMIC_RELAXED);
			d += 2, s += 2, n -= 2;
		} else {
			__atomic_store_n(d, *s, __ATOMIC_RELAXED);
			d += 1, s += 1, n -= 1;
		}
	}
}

/* Copies n bytes out of memory another thread may be writing (a READ's source, a WRITE's
 * source, as an HCA's DMA reads it) into the private d: every naturally aligned
 * 1/2/4/8-byte element of s is read by one load, never torn. */
static inline void sv_load_once(unsigned char *d, const unsigned char *s, size_t n)
{
	while (n) {
		uintptr_t a = (uintptr_t)s;
		if (n >= 8 && !(a & 7)) {
			uint64_t v = __atomic_load_n((const uint64_t *)s, __ATOMIC_RELAXED);
			memcpy(d, &v, 8);
			d += 8, s += 8, n -= 8;
		} else if (n >= 4 && !(a & 3)) {
			uint32_t v = __atomic_load_n((const uint32_t *)s, __ATOMIC_RELAXED);
			memcpy(d, &v, 4);
			d += 4, s += 4, n -= 4;
		} else if (n >= 2 && !(a & 1)) {
			uint16_t v = __atomic_load_n((const uint16_t *)s, __ATOMIC_RELAXED);
			memcpy(d, &v, 2);
			d += 2, s += 2, n -= 2;
		} else {
			*d = __atomic_load_n(s, __ATOMIC_RELAXED);
			d += 1, s += 1, n -= 1;
		}
	}
}

void sv_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Whether `gid` is one of the device's active port's. */
static inline int sv_gid_is_mine(const struct sv_config *cfg, const uint8_t *gid)
{
	for (int i = 0; i < cfg->ngids; i++)
		if (!memcmp(gid, cfg->gid[i].raw, 16))
			return 1;
	return 0;
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
	uint64_t late_since;               /* first uncharged timeout of this wait, 0: none */
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
	struct sv_config *cfg;     /* the opened device's */
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

static inline struct sv_ctx *to_ctx(struct ibv_context *c)
{
	return (struct sv_ctx *)((char *)c - offsetof(struct sv_ctx, vctx.context));
}

static inline int32_t psn_diff(uint32_t a, uint32_t b)
{
	return (int32_t)((a - b) << 8) >> 8;
}

/* rc.c: the protocol, the device thread and the posting verbs */
void *sv_device_thread(void *ctx);
int sv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int sv_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int sv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int sv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
void sv_qp_to_error(struct sv_qp *qp);
void sv_sq_pump(struct sv_qp *qp);

#endif
