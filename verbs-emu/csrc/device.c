/* softverbs: a software RDMA device behind the libibverbs ABI.
 *
 * Files: device.c (configuration, devices and contexts, strings), objects.c (protection
 * domains, memory regions, completion queues, queue pairs), rc.c (the reliable-connected
 * protocol, the device thread and the posting verbs), softverbs.h (what they share).
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
 * fails with retry-exceeded after retry_cnt retransmissions; a timeout while the responder
 * has not yet read what was sent (its process alive but not running) is not counted (rc.c,
 * "the retry clock").  Errors move the QP to the error state and flush its outstanding
 * work.
 *
 * Configuration (environment, read once):
 *   SOFTVERBS_DEVICES  how many devices the process lists (default 1, at most 16): device i
 *                      is softverbs<i> with LID SOFTVERBS_LID + i and GID fe80::<its LID>,
 *                      each an emulated node (several nodes' processes share one
 *                      environment and each opens its node's device)
 *   SOFTVERBS_DEVICE   device name of a single device (default softverbs0)
 *   SOFTVERBS_LID      the port's LID (default 1); the node's identity (the first device's)
 *   SOFTVERBS_GID      the active port's GID table: IPv6 addresses, comma-separated
 *                      (default one GID, fe80::<lid>; single device only)
 *   SOFTVERBS_PORT     the active port (default 1); ports 1..PORT-1 exist and are down
 *   SOFTVERBS_DIR      the rendezvous directory of the sockets (default /tmp/softverbs-<uid>)
 *   SOFTVERBS_ATOMIC   none|hca|glob: the atomic capability reported (default glob)
 *   SOFTVERBS_MIN_TIMEOUT_MS  lower bound of the retransmission timeout (default 50)
 *   SOFTVERBS_LATE_LIMIT_MS   how long a responder that has not read what was sent is
 *                      waited for before its timeouts count again (default 60000)
 *   SOFTVERBS_FAULTS   comma-separated faults of this process's devices:
 *                      drop=N        the next N packets it sends vanish
 *                      drop-every=K  every K-th packet it sends vanishes
 *                      rkey=N        the next N remote accesses it serves fail (bad key)
 *                      unreachable   everything it sends vanishes (a dead link)
 *                      delay-us=U    every packet it sends waits U microseconds first
 *   SOFTVERBS_FAULTS_<i>  the faults of device i instead (one emulated node of several)
 *
 * Thread safety: each context has one lock over its PDs, MRs, QPs and their queues, taken by
 * the posting verbs and the device thread; each CQ has its own lock (poll_cq takes only it).
 */
#define _GNU_SOURCE
#include "softverbs.h"

/* The devices: sv_cfg[i] configures sv_dev[i]; `cfg` is the one being read (then the
 * template every device starts from). */
static struct sv_config cfg;
static struct sv_config sv_cfg[SV_MAX_DEVICES];
static struct ibv_device sv_dev[SV_MAX_DEVICES];
static int sv_ndev;
uint64_t sv_counters[C_COUNT];
static int cfg_state; /* 0 unread, 1 good, -1 bad */
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;

void sv_warn(const char *fmt, ...)
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

static int parse_faults(const char *var, const char *spec)
{
	char buf[256];
	if (strlen(spec) >= sizeof(buf)) {
		sv_warn("%s too long", var);
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
			sv_warn("%s: bad item '%s' (expected drop=N, drop-every=K, "
				"rkey=N, unreachable, delay-us=U)", var, item);
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
			sv_warn("%s: unknown fault '%s'", var, item);
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
	memset(cfg.gid, 0, sizeof(cfg.gid));
	if ((s = getenv("SOFTVERBS_GID")) && *s) {
		char list[256];
		snprintf(list, sizeof(list), "%s", s);
		for (char *save = NULL, *g = strtok_r(list, ",", &save); g;
		     g = strtok_r(NULL, ",", &save)) {
			if (cfg.ngids == SV_MAX_GIDS ||
			    inet_pton(AF_INET6, g, cfg.gid[cfg.ngids].raw) != 1) {
				sv_warn("SOFTVERBS_GID='%s': expected 1 to %d IPv6 addresses, "
					"comma-separated", s, SV_MAX_GIDS);
				goto bad;
			}
			cfg.ngids++;
		}
	}
	if (!cfg.ngids) {
		cfg.gid[0].raw[0] = 0xfe;
		cfg.gid[0].raw[1] = 0x80;
		cfg.gid[0].raw[14] = (uint8_t)(cfg.lid >> 8);
		cfg.gid[0].raw[15] = (uint8_t)cfg.lid;
		cfg.ngids = 1;
	}
	cfg.port = 1;
	if ((s = getenv("SOFTVERBS_PORT")) && *s) {
		if (parse_long(s, &v) || v < 1 || v > SV_MAX_PORTS) {
			sv_warn("SOFTVERBS_PORT='%s': expected the active port, 1..%d", s,
				SV_MAX_PORTS);
			goto bad;
		}
		cfg.port = (uint8_t)v;
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
	cfg.late_limit_ns = 60000 * 1000000ull;
	if ((s = getenv("SOFTVERBS_LATE_LIMIT_MS")) && *s) {
		if (parse_long(s, &v)) {
			sv_warn("SOFTVERBS_LATE_LIMIT_MS='%s': expected milliseconds", s);
			goto bad;
		}
		cfg.late_limit_ns = (uint64_t)v * 1000000ull;
	}
	if ((s = getenv("SOFTVERBS_FAULTS")) && *s && parse_faults("SOFTVERBS_FAULTS", s))
		goto bad;
	sv_ndev = 1;
	if ((s = getenv("SOFTVERBS_DEVICES")) && *s) {
		if (parse_long(s, &v) || v < 1 || v > SV_MAX_DEVICES || cfg.lid + v - 1 > 0xbfff) {
			sv_warn("SOFTVERBS_DEVICES='%s': expected 1..%d devices (LIDs up to 49151)", s,
				SV_MAX_DEVICES);
			goto bad;
		}
		sv_ndev = (int)v;
	}
	if (sv_ndev > 1 && (s = getenv("SOFTVERBS_GID")) && *s) {
		sv_warn("SOFTVERBS_GID is for a single device: with SOFTVERBS_DEVICES each device's GID is fe80::<its LID>");
		goto bad;
	}
	const struct sv_config template = cfg;
	for (int i = 0; i < sv_ndev; i++) {
		struct sv_config *d = &sv_cfg[i];
		*d = template;
		if (sv_ndev > 1) {
			snprintf(d->name, sizeof(d->name), "softverbs%d", i);
			d->lid = (uint16_t)(template.lid + i);
			memset(d->gid, 0, sizeof(d->gid));
			d->gid[0].raw[0] = 0xfe;
			d->gid[0].raw[1] = 0x80;
			d->gid[0].raw[14] = (uint8_t)(d->lid >> 8);
			d->gid[0].raw[15] = (uint8_t)d->lid;
			d->ngids = 1;
			char var[32];
			snprintf(var, sizeof(var), "SOFTVERBS_FAULTS_%d", i);
			if ((s = getenv(var)) && *s) {
				d->drop_next = d->drop_every = d->rkey_faults = d->delay_us = 0;
				d->unreachable = 0;
				cfg = *d; /* parse_faults fills `cfg` */
				if (parse_faults(var, s))
					goto bad;
				*d = cfg;
			}
		}
		struct ibv_device *dev = &sv_dev[i];
		_Static_assert(sizeof(dev->name) == sizeof(d->name), "device name sizes");
		memcpy(dev->name, d->name, sizeof(dev->name));
		snprintf(dev->dev_name, sizeof(dev->dev_name), "uverbs%d", i);
		snprintf(dev->dev_path, sizeof(dev->dev_path), "%s", d->dir);
		snprintf(dev->ibdev_path, sizeof(dev->ibdev_path), "%s", d->dir);
		dev->node_type = IBV_NODE_CA;
		dev->transport_type = IBV_TRANSPORT_IB;
	}
	cfg_state = 1;
	return;
bad:
	cfg_state = -1;
}

/* The configuration of device `dev` (one of sv_dev), or NULL. */
static struct sv_config *dev_cfg(struct ibv_device *dev)
{
	for (int i = 0; i < sv_ndev; i++)
		if (dev == &sv_dev[i])
			return &sv_cfg[i];
	return NULL;
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
	struct ibv_device **l = calloc((size_t)sv_ndev + 1, sizeof(*l));
	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	for (int i = 0; i < sv_ndev; i++)
		l[i] = &sv_dev[i];
	if (num)
		*num = sv_ndev;
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

static uint64_t node_guid(const struct sv_config *cfg)
{
	return 0x0002c90300000000ull | cfg->lid;
}

SV_EXPORT __be64 ibv_get_device_guid(struct ibv_device *dev)
{
	struct sv_config *cfg = dev_cfg(dev);
	return cfg ? htobe64(node_guid(cfg)) : 0;
}

static void fill_port_attr(const struct sv_config *cfg, struct ibv_port_attr *a, uint8_t port)
{
	int up = port == cfg->port;
	memset(a, 0, sizeof(*a));
	a->state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = IBV_MTU_4096;
	a->gid_tbl_len = up ? cfg->ngids : 0;
	a->port_cap_flags = 0;
	a->max_msg_sz = 0x80000000u;
	a->pkey_tbl_len = 1;
	a->lid = up ? cfg->lid : 0;
	a->sm_lid = 1;
	a->max_vl_num = 1;
	a->active_width = 2;  /* 4x */
	a->active_speed = 32; /* EDR */
	a->phys_state = up ? 5 : 3; /* LinkUp : Disabled */
	a->link_layer = IBV_LINK_LAYER_INFINIBAND;
}

static int sv_query_port_ex(struct ibv_context *c, uint8_t port, struct ibv_port_attr *attr,
			    size_t len)
{
	struct sv_config *cfg = to_ctx(c)->cfg;
	if (port < 1 || port > cfg->port)
		return EINVAL;
	struct ibv_port_attr a;
	fill_port_attr(cfg, &a, port);
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

static void fill_device_attr(const struct sv_config *cfg, struct ibv_device_attr *a)
{
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "softverbs-1");
	a->node_guid = htobe64(node_guid(cfg));
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
	a->atomic_cap = cfg->atomic_cap;
	a->max_pkeys = 1;
	a->local_ca_ack_delay = 16;
	a->phys_port_cnt = cfg->port;
}

SV_EXPORT int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *attr)
{
	fill_device_attr(to_ctx(c)->cfg, attr);
	return 0;
}

static int sv_query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
			      struct ibv_device_attr_ex *attr, size_t size)
{
	(void)in;
	if (size < sizeof(attr->orig_attr))
		return EINVAL;
	memset(attr, 0, size);
	fill_device_attr(to_ctx(c)->cfg, &attr->orig_attr);
	return 0;
}

SV_EXPORT int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid)
{
	struct sv_config *cfg = to_ctx(c)->cfg;
	if (port != cfg->port || index < 0 || index >= cfg->ngids)
		return -1;
	*gid = cfg->gid[index];
	return 0;
}

SV_EXPORT int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index,
				struct ibv_gid_entry *entry, uint32_t flags, size_t size)
{
	struct sv_config *cfg = to_ctx(c)->cfg;
	(void)flags;
	if (port != cfg->port || index >= (uint32_t)cfg->ngids)
		return ENODATA;
	if (size < sizeof(*entry))
		return EINVAL;
	memset(entry, 0, sizeof(*entry));
	entry->gid = cfg->gid[index];
	entry->gid_index = index;
	entry->port_num = port;
	entry->gid_type = IBV_GID_TYPE_IB;
	return 0;
}

SV_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *c, struct ibv_gid_entry *entries,
				       size_t max, uint32_t flags, size_t size)
{
	struct sv_config *cfg = to_ctx(c)->cfg;
	if (max < (size_t)cfg->ngids || size < sizeof(*entries))
		return -EINVAL;
	for (int i = 0; i < cfg->ngids; i++) {
		int rc = _ibv_query_gid_ex(c, cfg->port, (uint32_t)i,
					   (struct ibv_gid_entry *)((char *)entries + (size_t)i * size),
					   flags, size);
		if (rc)
			return -rc;
	}
	return cfg->ngids;
}

SV_EXPORT int ibv_query_pkey(struct ibv_context *c, uint8_t port, int index, __be16 *pkey)
{
	struct sv_config *cfg = to_ctx(c)->cfg;
	if (port < 1 || port > cfg->port || index != 0)
		return -1;
	*pkey = htobe16(0xffff);
	return 0;
}

SV_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *dev)
{
	struct sv_config *cfg = dev_cfg(dev);
	if (!cfg) {
		errno = ENODEV;
		return NULL;
	}
	struct sv_ctx *ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		errno = ENOMEM;
		return NULL;
	}
	ctx->cfg = cfg;
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
	int e = pthread_create(&ctx->thread, NULL, sv_device_thread, ctx);
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
 * go-back-N retransmissions, duplicate requests answered, sequence NAKs, RNR NAKs,
 * completions delivered to completion queues (signalled sends, errors, flushes, receives).
 * Returns how many it wrote (at most n). */
SV_EXPORT size_t softverbs_counters(uint64_t *out, size_t n)
{
	size_t k = n < C_COUNT ? n : C_COUNT;
	for (size_t i = 0; i < k; i++)
		out[i] = __atomic_load_n(&sv_counters[i], __ATOMIC_RELAXED);
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
