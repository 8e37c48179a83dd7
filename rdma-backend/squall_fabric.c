/* squall_fabric: see squall_fabric.h for the contract. */
#define _GNU_SOURCE
#include "squall_fabric.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define SQF_API_VERSION FI_VERSION(1, 9)
#define SQF_DEFAULT_CHUNK (8ULL << 20) /* 8 MiB per fi_write */
#define SQF_RX_SLOTS 128                /* posted control-message receives */
#define SQF_TX_SLOTS 128                /* control-message send buffers */
#define SQF_AV_COUNT 256

enum { OP_WRITE = 1, OP_SEND = 2, OP_RECV = 3 };

struct sqf_group;

/* Every posted operation carries one of these as its context (FI_CONTEXT2
 * space first, as the provider may use it). */
struct sqf_op {
    struct fi_context2 ctx;
    int kind;
    int slot;                /* SEND/RECV: buffer slot */
    uint64_t tag;            /* SEND: caller's tag */
    uint64_t len;            /* SEND: length */
    struct sqf_group *group; /* WRITE: the sqf_write it belongs to */
};

/* One sqf_write call: its chunks complete independently; one event at the end. */
struct sqf_group {
    struct sqf_group *prev, *next;
    uint64_t tag;
    uint64_t len;
    size_t nposted, ncomplete;
    int closed; /* every chunk that will ever be posted is posted */
    int err;    /* first error (positive FI_E*) */
    struct sqf_op ops[];
};

struct sqf_mr {
    struct sqf_mr *prev, *next;
    sqf_ep *ep;
    struct fid_mr *mr;
    void *buf;
    size_t len;
    uint64_t key;
    void *desc;
};

struct sqf_ep {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_ep *ep;
    struct fid_av *av;
    struct fid_cq *cq;
    uint64_t mr_mode;
    uint64_t next_key; /* requested keys when the provider does not pick them */
    uint64_t chunk;
    uint64_t eagain; /* posts retried after -FI_EAGAIN */
    int cq_wait;     /* the CQ has a wait object: idle waits block in fi_cq_sread */
    int enabled;     /* fi_enable succeeded: the CQ may be progressed (shm has no region before) */
    struct sqf_mr *mrs; /* every live MR (user and internal) */

    /* control messages */
    uint8_t *rx_buf, *tx_buf;
    struct sqf_mr *rx_mr, *tx_mr;
    struct sqf_op rx_ops[SQF_RX_SLOTS];
    struct sqf_op tx_ops[SQF_TX_SLOTS];
    int rx_slots;
    int rx_unposted[SQF_RX_SLOTS]; /* slots waiting for a repost after -FI_EAGAIN */
    int n_rx_unposted;
    int tx_free[SQF_TX_SLOTS];
    int n_tx_free;

    struct sqf_group *groups; /* writes in flight */
    int pending;              /* groups + sends not yet reported */

    /* finished operations not yet handed to the caller */
    sqf_event *events;
    size_t ev_head, ev_count, ev_cap;

    char err[320];
};

/* ---------------------------------------------------------------- helpers */

static int set_err(sqf_ep *ep, int ret, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int set_err(sqf_ep *ep, int ret, const char *fmt, ...)
{
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    int code = ret < 0 ? -ret : ret;
    snprintf(ep->err, sizeof ep->err, "%s: %s (%d)", what, fi_strerror(code), -code);
    return ret < 0 ? ret : -ret;
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000ULL + (uint64_t)ts.tv_nsec / 1000ULL;
}

/* Back off while waiting: spin, then yield, then sleep up to 200 us. */
static void backoff(unsigned *round)
{
    unsigned r = (*round)++;
    if (r < 32)
        return;
    if (r < 96) {
        sched_yield();
        return;
    }
    unsigned us = 10u << ((r - 96) / 16 < 4 ? (r - 96) / 16 : 4); /* 10 .. 160 us */
    struct timespec ts = {0, (long)us * 1000L};
    nanosleep(&ts, NULL);
}

static int push_event(sqf_ep *ep, int kind, int err, uint64_t tag, uint64_t len, const void *data,
                      size_t dlen)
{
    if (ep->ev_count == ep->ev_cap) {
        size_t cap = ep->ev_cap ? ep->ev_cap * 2 : 64;
        sqf_event *ev = malloc(cap * sizeof *ev);
        if (!ev)
            return set_err(ep, -FI_ENOMEM, "event queue");
        for (size_t i = 0; i < ep->ev_count; i++)
            ev[i] = ep->events[(ep->ev_head + i) % ep->ev_cap];
        free(ep->events);
        ep->events = ev;
        ep->ev_cap = cap;
        ep->ev_head = 0;
    }
    sqf_event *e = &ep->events[(ep->ev_head + ep->ev_count) % ep->ev_cap];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->err = err;
    e->tag = tag;
    e->len = len;
    if (data && dlen)
        memcpy(e->data, data, dlen > SQF_MSG_MAX ? SQF_MSG_MAX : dlen);
    ep->ev_count++;
    return 0;
}

static void group_unlink(sqf_ep *ep, struct sqf_group *g)
{
    if (g->prev)
        g->prev->next = g->next;
    else
        ep->groups = g->next;
    if (g->next)
        g->next->prev = g->prev;
}

/* Report and free a write group once every posted chunk has completed. */
static int group_maybe_finish(sqf_ep *ep, struct sqf_group *g)
{
    if (!g->closed || g->ncomplete < g->nposted)
        return 0;
    int ret = push_event(ep, SQF_EV_WRITE, g->err, g->tag, g->len, NULL, 0);
    group_unlink(ep, g);
    free(g);
    ep->pending--;
    return ret;
}

static int post_recv(sqf_ep *ep, int slot)
{
    struct sqf_op *op = &ep->rx_ops[slot];
    op->kind = OP_RECV;
    op->slot = slot;
    int ret = (int)fi_recv(ep->ep, ep->rx_buf + (size_t)slot * SQF_MSG_MAX, SQF_MSG_MAX, ep->rx_mr->desc,
                           FI_ADDR_UNSPEC, &op->ctx);
    if (ret == -FI_EAGAIN) {
        ep->rx_unposted[ep->n_rx_unposted++] = slot;
        return 0;
    }
    if (ret)
        return set_err(ep, ret, "fi_recv");
    return 0;
}

static int handle_completion(sqf_ep *ep, struct sqf_op *op, uint64_t len, int err)
{
    switch (op->kind) {
    case OP_WRITE: {
        struct sqf_group *g = op->group;
        g->ncomplete++;
        if (err && !g->err)
            g->err = err;
        return group_maybe_finish(ep, g);
    }
    case OP_SEND: {
        int ret = push_event(ep, SQF_EV_SEND, err, op->tag, op->len, NULL, 0);
        ep->tx_free[ep->n_tx_free++] = op->slot;
        ep->pending--;
        return ret;
    }
    case OP_RECV: {
        int ret = 0;
        if (err != FI_ECANCELED)
            ret = push_event(ep, SQF_EV_RECV, err, 0, len, ep->rx_buf + (size_t)op->slot * SQF_MSG_MAX,
                             err ? 0 : (size_t)len);
        int r2 = err == FI_ECANCELED ? 0 : post_recv(ep, op->slot);
        return ret ? ret : r2;
    }
    default:
        return set_err(ep, -FI_EOTHER, "completion with unknown context");
    }
}

/* Read the CQ until it is empty; returns the number of completions handled. */
static int progress(sqf_ep *ep)
{
    struct fi_cq_msg_entry entries[32];
    int handled = 0;
    while (ep->n_rx_unposted > 0) {
        int slot = ep->rx_unposted[--ep->n_rx_unposted];
        int ret = post_recv(ep, slot);
        if (ret)
            return ret;
        if (ep->n_rx_unposted && ep->rx_unposted[ep->n_rx_unposted - 1] == slot)
            break; /* still -FI_EAGAIN: try on the next round */
    }
    for (;;) {
        ssize_t n = fi_cq_read(ep->cq, entries, 32);
        if (n == -FI_EAGAIN)
            return handled;
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry ee;
            memset(&ee, 0, sizeof ee);
            ssize_t r = fi_cq_readerr(ep->cq, &ee, 0);
            if (r < 0) {
                if (r == -FI_EAGAIN)
                    continue;
                return set_err(ep, (int)r, "fi_cq_readerr");
            }
            if (ee.err != FI_ECANCELED) {
                char buf[160];
                const char *detail = fi_cq_strerror(ep->cq, ee.prov_errno, ee.err_data, buf, sizeof buf);
                snprintf(ep->err, sizeof ep->err, "completion error: %s (%d); provider: %s",
                         fi_strerror(ee.err), -ee.err, detail ? detail : "?");
            }
            if (!ee.op_context) /* not tied to an operation (e.g. a peer's connection): noted above */
                continue;
            int ret = handle_completion(ep, (struct sqf_op *)ee.op_context, ee.len, ee.err ? ee.err : FI_EOTHER);
            if (ret)
                return ret;
            handled++;
            continue;
        }
        if (n < 0)
            return set_err(ep, (int)n, "fi_cq_read");
        for (ssize_t i = 0; i < n; i++) {
            if (!entries[i].op_context)
                continue;
            int ret = handle_completion(ep, (struct sqf_op *)entries[i].op_context, entries[i].len, 0);
            if (ret)
                return ret;
        }
        handled += (int)n;
    }
}

/* Nothing to do right now: spin briefly, then block in fi_cq_sread for up to 1 ms when the CQ
 * has a wait object (it progresses and wakes on data), else back off. Returns completions
 * handled or a negative error. */
static int idle(sqf_ep *ep, unsigned *round)
{
    if (!ep->cq_wait || *round < 16) {
        backoff(round);
        return 0;
    }
    struct fi_cq_msg_entry e;
    ssize_t n = fi_cq_sread(ep->cq, &e, 1, NULL, 1);
    if (n == 1) {
        if (!e.op_context)
            return 0;
        int ret = handle_completion(ep, (struct sqf_op *)e.op_context, e.len, 0);
        return ret ? ret : 1;
    }
    if (n == -FI_EAGAIN || n == -FI_ETIMEDOUT || n == -FI_EAVAIL || n == 0)
        return 0; /* errors are read by the next progress() */
    return set_err(ep, (int)n, "fi_cq_sread");
}

static struct sqf_mr *mr_register(sqf_ep *ep, void *buf, size_t len, uint64_t access, int *ret_out)
{
    struct sqf_mr *m = calloc(1, sizeof *m);
    if (!m) {
        *ret_out = set_err(ep, -FI_ENOMEM, "MR");
        return NULL;
    }
    uint64_t requested = (ep->mr_mode & FI_MR_PROV_KEY) ? 0 : ep->next_key++;
    int ret = fi_mr_reg(ep->domain, buf, len, access, 0, requested, 0, &m->mr, NULL);
    if (ret) {
        *ret_out = set_err(ep, ret, "fi_mr_reg(%zu bytes)", len);
        free(m);
        return NULL;
    }
    if (ep->mr_mode & FI_MR_ENDPOINT) {
        ret = fi_mr_bind(m->mr, &ep->ep->fid, 0);
        if (ret) {
            *ret_out = set_err(ep, ret, "fi_mr_bind");
            fi_close(&m->mr->fid);
            free(m);
            return NULL;
        }
        ret = fi_mr_enable(m->mr);
        if (ret) {
            *ret_out = set_err(ep, ret, "fi_mr_enable");
            fi_close(&m->mr->fid);
            free(m);
            return NULL;
        }
    }
    m->ep = ep;
    m->buf = buf;
    m->len = len;
    m->key = fi_mr_key(m->mr);
    if (m->key == FI_KEY_NOTAVAIL) {
        *ret_out = set_err(ep, -FI_ENOSYS, "fi_mr_key: raw keys (FI_MR_RAW) are not supported");
        fi_close(&m->mr->fid);
        free(m);
        return NULL;
    }
    m->desc = fi_mr_desc(m->mr);
    m->next = ep->mrs;
    if (ep->mrs)
        ep->mrs->prev = m;
    ep->mrs = m;
    *ret_out = 0;
    return m;
}

static int mr_release(struct sqf_mr *m)
{
    sqf_ep *ep = m->ep;
    int ret = fi_close(&m->mr->fid);
    if (ret)
        set_err(ep, ret, "fi_close(mr)");
    if (m->prev)
        m->prev->next = m->next;
    else
        ep->mrs = m->next;
    if (m->next)
        m->next->prev = m->prev;
    free(m);
    return ret;
}

/* The shm provider names an endpoint's region /dev/shm/<pid>:<domain>:<ep> unless the source
 * address says otherwise, and creates it with O_EXCL. A process killed by SIGKILL leaves its
 * region behind; once its pid is reused, fi_enable fails there (and libfabric 1.17 then crashes
 * in the CQ's progress). So every shm endpoint gets a name of its own, sqf-<pid>-<time>-<n>, and
 * regions of that form whose process is gone are removed first. */
#define SQF_SHM_PREFIX "sqf-"

static void sweep_dead_shm_regions(void)
{
    DIR *dir = opendir("/dev/shm");
    if (!dir)
        return;
    struct dirent *d;
    while ((d = readdir(dir)) != NULL) {
        if (strncmp(d->d_name, SQF_SHM_PREFIX, strlen(SQF_SHM_PREFIX)) != 0)
            continue;
        char *end = NULL;
        long pid = strtol(d->d_name + strlen(SQF_SHM_PREFIX), &end, 10);
        if (pid <= 0 || !end || *end != '-')
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* alive (or not ours to judge) */
        char path[300];
        snprintf(path, sizeof path, "/%s", d->d_name);
        (void)shm_unlink(path);
    }
    closedir(dir);
}

static int name_shm_endpoint(struct fi_info *info)
{
    if (!info->fabric_attr->prov_name || strcmp(info->fabric_attr->prov_name, "shm") != 0 ||
        info->addr_format != FI_ADDR_STR)
        return 0;
    sweep_dead_shm_regions();
    static unsigned opened;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char name[32];
    snprintf(name, sizeof name, SQF_SHM_PREFIX "%d-%lx-%u", (int)getpid(),
             (unsigned long)(((uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec) & 0xffffffffffULL),
             opened++);
    char *copy = strdup(name);
    if (!copy)
        return -FI_ENOMEM;
    free(info->src_addr);
    info->src_addr = copy;
    info->src_addrlen = strlen(copy) + 1;
    return 0;
}

/* ---------------------------------------------------------------- public */

const char *sqf_strerror(int code) { return fi_strerror(code < 0 ? -code : code); }

const char *sqf_last_error(sqf_ep *ep) { return ep ? ep->err : "no endpoint"; }

int sqf_open(const char *provider, sqf_ep **out, char *err, size_t errlen)
{
    *out = NULL;
    sqf_ep *ep = calloc(1, sizeof *ep);
    struct fi_info *hints = fi_allocinfo();
    if (!ep || !hints) {
        snprintf(err, errlen, "out of memory");
        free(ep);
        fi_freeinfo(hints);
        return -FI_ENOMEM;
    }
    int ret;
    hints->caps = FI_MSG | FI_RMA | FI_WRITE | FI_REMOTE_WRITE | FI_SEND | FI_RECV;
    hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->domain_attr->av_type = FI_AV_TABLE;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
    hints->domain_attr->control_progress = FI_PROGRESS_MANUAL;
    hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
    if (provider && *provider) {
        hints->fabric_attr->prov_name = strdup(provider);
        if (!hints->fabric_attr->prov_name) {
            ret = -FI_ENOMEM;
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
    }
    ret = fi_getinfo(SQF_API_VERSION, NULL, NULL, 0, hints, &ep->info);
    if (ret) {
        snprintf(err, errlen,
                 "fi_getinfo: no provider%s%s offers FI_EP_RDM with FI_RMA and FI_DELIVERY_COMPLETE: %s (%d)",
                 provider && *provider ? " named " : "", provider && *provider ? provider : "", fi_strerror(-ret),
                 ret);
        goto fail;
    }
    ep->mr_mode = ep->info->domain_attr->mr_mode;
    ep->next_key = 1;
    ep->chunk = SQF_DEFAULT_CHUNK;
    if (ep->info->ep_attr->max_msg_size && ep->chunk > ep->info->ep_attr->max_msg_size)
        ep->chunk = ep->info->ep_attr->max_msg_size;

#define STEP(call, what)                                                                                   \
    do {                                                                                                   \
        ret = (call);                                                                                      \
        if (ret) {                                                                                         \
            snprintf(err, errlen, "%s (provider %s): %s (%d)", what, ep->info->fabric_attr->prov_name,     \
                     fi_strerror(-ret), ret);                                                              \
            goto fail;                                                                                     \
        }                                                                                                  \
    } while (0)

    STEP(name_shm_endpoint(ep->info), "naming the shm region");
    STEP(fi_fabric(ep->info->fabric_attr, &ep->fabric, NULL), "fi_fabric");
    STEP(fi_domain(ep->fabric, ep->info, &ep->domain, NULL), "fi_domain");

    struct fi_cq_attr cq_attr;
    memset(&cq_attr, 0, sizeof cq_attr);
    cq_attr.format = FI_CQ_FORMAT_MSG;
    cq_attr.size = 0;
    /* With a wait object an idle rank sleeps in fi_cq_sread (which progresses the provider and
     * wakes on socket data) instead of spinning. Used for the tcp provider, where it was checked;
     * shm with a wait object stalled here. SQF_CQ_WAIT=none|wait overrides. */
    const char *wait_env = getenv("SQF_CQ_WAIT");
    int want_wait = strstr(ep->info->fabric_attr->prov_name, "tcp") != NULL;
    if (wait_env)
        want_wait = strcmp(wait_env, "wait") == 0;
    ret = -FI_ENOSYS;
    if (want_wait) {
        cq_attr.wait_obj = FI_WAIT_UNSPEC;
        ret = fi_cq_open(ep->domain, &cq_attr, &ep->cq, NULL);
        ep->cq_wait = ret == 0;
    }
    if (ret) {
        cq_attr.wait_obj = FI_WAIT_NONE;
        STEP(fi_cq_open(ep->domain, &cq_attr, &ep->cq, NULL), "fi_cq_open");
    }

    struct fi_av_attr av_attr;
    memset(&av_attr, 0, sizeof av_attr);
    av_attr.type = FI_AV_TABLE;
    av_attr.count = SQF_AV_COUNT;
    STEP(fi_av_open(ep->domain, &av_attr, &ep->av, NULL), "fi_av_open");

    STEP(fi_endpoint(ep->domain, ep->info, &ep->ep, NULL), "fi_endpoint");
    STEP(fi_ep_bind(ep->ep, &ep->av->fid, 0), "fi_ep_bind(av)");
    STEP(fi_ep_bind(ep->ep, &ep->cq->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)");
    STEP(fi_enable(ep->ep), "fi_enable");
    ep->enabled = 1;

    /* control-message pools (registered: FI_MR_LOCAL wants descriptors) */
    ep->rx_slots = SQF_RX_SLOTS;
    if (ep->info->rx_attr->size && ep->info->rx_attr->size < (size_t)ep->rx_slots)
        ep->rx_slots = (int)ep->info->rx_attr->size;
    size_t pool = (size_t)SQF_MSG_MAX * (SQF_RX_SLOTS > SQF_TX_SLOTS ? SQF_RX_SLOTS : SQF_TX_SLOTS);
    if (posix_memalign((void **)&ep->rx_buf, 4096, pool) || posix_memalign((void **)&ep->tx_buf, 4096, pool)) {
        ret = -FI_ENOMEM;
        snprintf(err, errlen, "out of memory (message pools)");
        goto fail;
    }
    memset(ep->rx_buf, 0, pool);
    memset(ep->tx_buf, 0, pool);
    ep->rx_mr = mr_register(ep, ep->rx_buf, pool, FI_RECV, &ret);
    if (!ep->rx_mr) {
        snprintf(err, errlen, "%s", ep->err);
        goto fail;
    }
    ep->tx_mr = mr_register(ep, ep->tx_buf, pool, FI_SEND, &ret);
    if (!ep->tx_mr) {
        snprintf(err, errlen, "%s", ep->err);
        goto fail;
    }
    for (int i = 0; i < SQF_TX_SLOTS; i++)
        ep->tx_free[ep->n_tx_free++] = SQF_TX_SLOTS - 1 - i;
    for (int i = 0; i < ep->rx_slots; i++) {
        ret = post_recv(ep, i);
        if (ret) {
            snprintf(err, errlen, "%s", ep->err);
            goto fail;
        }
    }
#undef STEP
    fi_freeinfo(hints);
    *out = ep;
    return 0;

fail:
    fi_freeinfo(hints);
    sqf_close(ep, 0);
    return ret ? ret : -FI_EOTHER;
}

int sqf_close(sqf_ep *ep, int linger_ms)
{
    if (!ep)
        return 0;
    int first = 0;
    if (ep->enabled) {
        uint64_t deadline = now_us() + (uint64_t)(linger_ms > 0 ? linger_ms : 0) * 1000ULL;
        unsigned round = 0;
        while (ep->pending > 0 && now_us() < deadline) {
            if (progress(ep) < 0)
                break;
            backoff(&round);
        }
        /* posted receives hold the rx pool: cancel them before closing its MR (a slot that is
         * not posted answers -FI_ENOENT, which is fine here; closing the endpoint drops the rest) */
        for (int i = 0; i < ep->rx_slots; i++)
            if (ep->rx_ops[i].kind == OP_RECV)
                (void)fi_cancel(&ep->ep->fid, &ep->rx_ops[i].ctx);
        for (int i = 0; i < 8; i++)
            if (progress(ep) < 0)
                break;
    }
    while (ep->mrs) {
        int ret = mr_release(ep->mrs);
        if (ret && !first)
            first = ret;
    }
    struct fid *fids[] = {
        ep->ep ? &ep->ep->fid : NULL,           ep->av ? &ep->av->fid : NULL,
        ep->cq ? &ep->cq->fid : NULL,           ep->domain ? &ep->domain->fid : NULL,
        ep->fabric ? &ep->fabric->fid : NULL,
    };
    for (size_t i = 0; i < sizeof fids / sizeof fids[0]; i++) {
        if (!fids[i])
            continue;
        int ret = fi_close(fids[i]);
        if (ret && !first) {
            first = ret;
            set_err(ep, ret, "fi_close");
        }
    }
    while (ep->groups) {
        struct sqf_group *g = ep->groups;
        ep->groups = g->next;
        free(g);
    }
    free(ep->events);
    free(ep->rx_buf);
    free(ep->tx_buf);
    if (ep->info)
        fi_freeinfo(ep->info);
    free(ep);
    return first;
}

int sqf_get_info(sqf_ep *ep, sqf_info *info)
{
    memset(info, 0, sizeof *info);
    struct fi_info *fi = ep->info;
    snprintf(info->provider, sizeof info->provider, "%s", fi->fabric_attr->prov_name ? fi->fabric_attr->prov_name : "");
    snprintf(info->fabric, sizeof info->fabric, "%s", fi->fabric_attr->name ? fi->fabric_attr->name : "");
    snprintf(info->domain, sizeof info->domain, "%s", fi->domain_attr->name ? fi->domain_attr->name : "");
    info->mr_mode = ep->mr_mode;
    info->mr_key_size = fi->domain_attr->mr_key_size;
    info->max_msg_size = fi->ep_attr->max_msg_size;
    info->tx_size = fi->tx_attr->size;
    info->rx_size = fi->rx_attr->size;
    info->inject_size = fi->tx_attr->inject_size;
    info->chunk_size = ep->chunk;
    info->data_progress = (int32_t)fi->domain_attr->data_progress;
    info->virt_addr = (ep->mr_mode & FI_MR_VIRT_ADDR) ? 1 : 0;
    info->eagain = ep->eagain;
    info->cq_wait = ep->cq_wait;
    size_t len = 0;
    int ret = fi_getname(&ep->ep->fid, NULL, &len);
    if (ret && ret != -FI_ETOOSMALL)
        return set_err(ep, ret, "fi_getname");
    info->addrlen = len;
    return 0;
}

int sqf_set_chunk_size(sqf_ep *ep, uint64_t chunk)
{
    if (chunk == 0)
        chunk = SQF_DEFAULT_CHUNK;
    if (ep->info->ep_attr->max_msg_size && chunk > ep->info->ep_attr->max_msg_size)
        chunk = ep->info->ep_attr->max_msg_size;
    ep->chunk = chunk;
    return 0;
}

int sqf_getname(sqf_ep *ep, void *buf, size_t *len)
{
    int ret = fi_getname(&ep->ep->fid, buf, len);
    if (ret)
        return set_err(ep, ret, "fi_getname (buffer of %zu bytes)", *len);
    return 0;
}

int sqf_av_insert(sqf_ep *ep, const void *addr, uint64_t *fi_addr)
{
    fi_addr_t a = FI_ADDR_NOTAVAIL;
    int ret = fi_av_insert(ep->av, addr, 1, &a, 0, NULL);
    if (ret != 1)
        return set_err(ep, ret < 0 ? ret : -FI_EINVAL, "fi_av_insert");
    *fi_addr = (uint64_t)a;
    return 0;
}

int sqf_mr_reg(sqf_ep *ep, void *buf, size_t len, int remote_write, sqf_mr **out)
{
    int ret;
    *out = mr_register(ep, buf, len, remote_write ? FI_REMOTE_WRITE : FI_WRITE, &ret);
    return *out ? 0 : ret;
}

uint64_t sqf_mr_key(sqf_mr *mr) { return mr->key; }

uint64_t sqf_mr_remote_base(sqf_mr *mr)
{
    return (mr->ep->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)mr->buf : 0;
}

int sqf_mr_close(sqf_mr *mr)
{
    if (!mr)
        return 0;
    return mr_release(mr);
}

int sqf_write(sqf_ep *ep, sqf_mr *local, uint64_t local_off, uint64_t len, uint64_t dest, uint64_t remote_addr,
              uint64_t rkey, uint64_t tag, int timeout_ms)
{
    if (local_off > local->len || len > local->len - local_off)
        return set_err(ep, -FI_EINVAL, "sqf_write: [%llu, +%llu) lies outside the local region of %zu bytes",
                       (unsigned long long)local_off, (unsigned long long)len, local->len);
    size_t nchunks = len ? (size_t)((len + ep->chunk - 1) / ep->chunk) : 0;
    struct sqf_group *g = calloc(1, sizeof *g + nchunks * sizeof(struct sqf_op));
    if (!g)
        return set_err(ep, -FI_ENOMEM, "sqf_write");
    g->tag = tag;
    g->len = len;
    g->next = ep->groups;
    if (ep->groups)
        ep->groups->prev = g;
    ep->groups = g;
    ep->pending++;

    uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : now_us() + (uint64_t)timeout_ms * 1000ULL;
    int ret = 0;
    for (size_t i = 0; i < nchunks; i++) {
        uint64_t off = (uint64_t)i * ep->chunk;
        uint64_t n = len - off < ep->chunk ? len - off : ep->chunk;
        struct sqf_op *op = &g->ops[i];
        op->kind = OP_WRITE;
        op->group = g;
        struct iovec iov = {.iov_base = (uint8_t *)local->buf + local_off + off, .iov_len = (size_t)n};
        void *desc = local->desc;
        struct fi_rma_iov rma = {.addr = remote_addr + off, .len = (size_t)n, .key = rkey};
        struct fi_msg_rma msg = {
            .msg_iov = &iov,
            .desc = &desc,
            .iov_count = 1,
            .addr = (fi_addr_t)dest,
            .rma_iov = &rma,
            .rma_iov_count = 1,
            .context = &op->ctx,
            .data = 0,
        };
        unsigned round = 0;
        for (;;) {
            ret = (int)fi_writemsg(ep->ep, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE);
            if (ret != -FI_EAGAIN)
                break;
            /* the transmit queue is full: make progress, then retry */
            ep->eagain++;
            int p = progress(ep);
            if (p < 0) {
                ret = p;
                goto out;
            }
            if (now_us() > deadline) {
                ret = set_err(ep, -FI_ETIMEDOUT, "fi_writemsg: transmit queue stayed full for %d ms", timeout_ms);
                goto out;
            }
            if (p == 0 && (p = idle(ep, &round)) < 0) {
                ret = p;
                goto out;
            }
        }
        if (ret) {
            set_err(ep, ret, "fi_writemsg(%llu bytes)", (unsigned long long)n);
            goto out;
        }
        g->nposted++;
    }
out:
    if (ret && !g->err)
        g->err = -ret;
    g->closed = 1;
    if (ret && g->nposted == 0) {
        /* nothing is in flight: forget the group, the caller sees the error now */
        group_unlink(ep, g);
        free(g);
        ep->pending--;
        return ret;
    }
    int r2 = group_maybe_finish(ep, g);
    return ret ? ret : r2;
}

int sqf_send(sqf_ep *ep, uint64_t dest, const void *msg, size_t len, uint64_t tag, int timeout_ms)
{
    if (len > SQF_MSG_MAX)
        return set_err(ep, -FI_EMSGSIZE, "sqf_send: %zu bytes exceed the %d-byte control message", len,
                       SQF_MSG_MAX);
    uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : now_us() + (uint64_t)timeout_ms * 1000ULL;
    unsigned round = 0;
    while (ep->n_tx_free == 0) {
        int p = progress(ep);
        if (p < 0)
            return p;
        if (now_us() > deadline)
            return set_err(ep, -FI_ETIMEDOUT, "sqf_send: no free message buffer after %d ms", timeout_ms);
        if (p == 0 && (p = idle(ep, &round)) < 0)
            return p;
    }
    int slot = ep->tx_free[--ep->n_tx_free];
    uint8_t *buf = ep->tx_buf + (size_t)slot * SQF_MSG_MAX;
    memcpy(buf, msg, len);
    struct sqf_op *op = &ep->tx_ops[slot];
    op->kind = OP_SEND;
    op->slot = slot;
    op->tag = tag;
    op->len = len;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    void *desc = ep->tx_mr->desc;
    struct fi_msg m = {
        .msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = (fi_addr_t)dest, .context = &op->ctx, .data = 0};
    int ret;
    round = 0;
    for (;;) {
        ret = (int)fi_sendmsg(ep->ep, &m, FI_COMPLETION | FI_DELIVERY_COMPLETE);
        if (ret != -FI_EAGAIN)
            break;
        ep->eagain++;
        int p = progress(ep);
        if (p < 0) {
            ret = p;
            break;
        }
        if (now_us() > deadline) {
            ret = set_err(ep, -FI_ETIMEDOUT, "fi_sendmsg: transmit queue stayed full for %d ms", timeout_ms);
            break;
        }
        if (p == 0 && (p = idle(ep, &round)) < 0) {
            ret = p;
            break;
        }
    }
    if (ret) {
        if (ret != -FI_ETIMEDOUT)
            set_err(ep, ret, "fi_sendmsg");
        ep->tx_free[ep->n_tx_free++] = slot;
        return ret;
    }
    ep->pending++;
    return 0;
}

int sqf_poll(sqf_ep *ep, sqf_event *events, int max, int timeout_ms)
{
    uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : now_us() + (uint64_t)timeout_ms * 1000ULL;
    unsigned round = 0;
    for (;;) {
        int p = progress(ep);
        if (p < 0)
            return p;
        if (ep->ev_count > 0 || timeout_ms == 0 || now_us() >= deadline)
            break;
        if (p == 0 && (p = idle(ep, &round)) < 0)
            return p;
    }
    int n = 0;
    while (n < max && ep->ev_count > 0) {
        events[n++] = ep->events[ep->ev_head];
        ep->ev_head = (ep->ev_head + 1) % ep->ev_cap;
        ep->ev_count--;
    }
    return n;
}

int sqf_pending(sqf_ep *ep) { return ep->pending; }
