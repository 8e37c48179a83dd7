/*
 * squall_fabric: a small RMA-write core on libfabric for Squall's fabric exchange.
 *
 * One sqf_ep is one rank's endpoint: fabric, domain, FI_EP_RDM endpoint,
 * FI_AV_TABLE address vector and one completion queue (manual progress: every
 * call that waits polls the CQ). It gives
 *
 *   - memory registration honouring the provider's mr_mode (FI_MR_LOCAL,
 *     FI_MR_VIRT_ADDR, FI_MR_ALLOCATED, FI_MR_PROV_KEY, FI_MR_ENDPOINT),
 *   - RMA writes (FI_DELIVERY_COMPLETE) of any length, split into chunks, with
 *     -FI_EAGAIN handled by progressing the CQ and retrying,
 *   - small control messages (fi_send into a posted receive pool) by which a
 *     target learns that writes landed: the core never relies on FI_RMA_EVENT,
 *   - polling that turns completions into sqf_event records for the caller; an idle
 *     poll blocks in fi_cq_sread where the CQ has a wait object (tcp), else backs off.
 *
 * Every function returns 0 (or a count) on success and a negative libfabric
 * error code (-FI_E*) on failure; sqf_last_error() then holds a message with
 * fi_strerror's text. An endpoint is used by one thread at a time.
 *
 * The section between the CDEF markers is read by build_ffi.py as the cffi
 * declarations: keep it free of preprocessor lines other than the markers.
 */
#ifndef SQUALL_FABRIC_H
#define SQUALL_FABRIC_H

#include <stddef.h>
#include <stdint.h>

/* CDEF-BEGIN */
#define SQF_MSG_MAX 64
#define SQF_EV_WRITE 1
#define SQF_EV_SEND 2
#define SQF_EV_RECV 3

typedef struct sqf_ep sqf_ep;
typedef struct sqf_mr sqf_mr;

/* One finished operation. WRITE: all chunks of one sqf_write are complete at
 * the target (delivery complete). SEND: a control message was delivered.
 * RECV: a control message arrived (payload in data, length in len). */
typedef struct {
    int32_t kind;
    int32_t err;            /* 0, or a positive FI_E* code */
    uint64_t tag;           /* the caller's tag (WRITE, SEND) */
    uint64_t len;           /* bytes written / sent / received */
    uint8_t data[64];       /* RECV: the message */
} sqf_event;

/* What the provider gave us (fi_getinfo result, after negotiation). */
typedef struct {
    char provider[64];
    char fabric[64];
    char domain[64];
    uint64_t mr_mode;
    uint64_t mr_key_size;
    uint64_t max_msg_size;
    uint64_t tx_size;
    uint64_t rx_size;
    uint64_t inject_size;
    uint64_t addrlen;
    uint64_t chunk_size;    /* writes are split into chunks of at most this */
    int32_t data_progress;  /* FI_PROGRESS_* */
    int32_t virt_addr;      /* 1 when remote addresses are virtual addresses */
    uint64_t eagain;        /* posts retried after -FI_EAGAIN so far */
    int32_t cq_wait;        /* 1 when idle waits block in fi_cq_sread (CQ wait object) */
} sqf_info;

/* Open an endpoint. provider: libfabric provider name ("tcp", "shm",
 * "tcp;ofi_rxm", "efa") or NULL/"" for the first that fits. On failure *out is
 * NULL and err holds the reason. */
int sqf_open(const char *provider, sqf_ep **out, char *err, size_t errlen);
/* Release everything: outstanding operations are given up to linger_ms to
 * finish, then cancelled; MRs still registered are closed. */
int sqf_close(sqf_ep *ep, int linger_ms);
int sqf_get_info(sqf_ep *ep, sqf_info *info);
const char *sqf_last_error(sqf_ep *ep);
const char *sqf_strerror(int code);
/* Split writes into chunks of at most chunk bytes (tests use tiny chunks to
 * exercise -FI_EAGAIN); 0 restores the default. */
int sqf_set_chunk_size(sqf_ep *ep, uint64_t chunk);

/* This endpoint's address (fi_getname): *len in = buffer size, out = length. */
int sqf_getname(sqf_ep *ep, void *buf, size_t *len);
/* Insert a peer's address; *fi_addr receives its handle. */
int sqf_av_insert(sqf_ep *ep, const void *addr, uint64_t *fi_addr);

/* Register [buf, buf+len). remote_write: the region is a target of writes
 * (a receive window); otherwise it is a local source of writes. */
int sqf_mr_reg(sqf_ep *ep, void *buf, size_t len, int remote_write, sqf_mr **out);
uint64_t sqf_mr_key(sqf_mr *mr);
/* The address a peer must use for offset 0 of the region: the virtual address
 * with FI_MR_VIRT_ADDR, else 0 (offsets). */
uint64_t sqf_mr_remote_base(sqf_mr *mr);
int sqf_mr_close(sqf_mr *mr);

/* Write len bytes from local MR offset local_off to the peer's region at
 * remote_addr (sqf_mr_remote_base + offset) with key rkey. Posts every chunk
 * (retrying -FI_EAGAIN while polling the CQ, for at most timeout_ms; <0 waits
 * forever) and returns; one SQF_EV_WRITE event with tag reports completion. */
int sqf_write(sqf_ep *ep, sqf_mr *local, uint64_t local_off, uint64_t len, uint64_t dest,
              uint64_t remote_addr, uint64_t rkey, uint64_t tag, int timeout_ms);
/* Send a control message of at most SQF_MSG_MAX bytes (copied); an
 * SQF_EV_SEND event with tag reports delivery. */
int sqf_send(sqf_ep *ep, uint64_t dest, const void *msg, size_t len, uint64_t tag, int timeout_ms);
/* Progress the CQ and return up to max events (0 if none arrived within
 * timeout_ms; 0 polls once). */
int sqf_poll(sqf_ep *ep, sqf_event *events, int max, int timeout_ms);
/* Operations posted and not yet reported. */
int sqf_pending(sqf_ep *ep);
/* CDEF-END */

#endif
