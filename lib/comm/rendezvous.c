/* TCP rendezvous at MASTER_ADDR:MASTER_PORT: rank 0 listens, the other ranks
 * connect and send one blob each, rank 0 answers every rank with all blobs.
 * Used to hand NCCL's unique id to the ranks of a torchrun-style launch; any
 * fixed-size blob works. Plain blocking-free sockets with poll(), so every
 * wait is bounded by one deadline. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "comm_internal.h"
#include "errors.h"

#define RDV_MAGIC 0x47505852u /* "GPXR" */
#define RDV_VERSION 1u
#define RDV_HELLO_BYTES 24 /* magic, version, rank, world (u32), blob length (u64) */
#define RDV_REPLY_BYTES 8  /* magic, status (u32) */
#define RDV_MAX_BLOB (1u << 20)

/* Reply status, also what a peer reports to its caller. */
enum {
    RDV_OK = 0,
    RDV_BAD_WORLD = 1,
    RDV_BAD_LEN = 2,
    RDV_BAD_RANK = 3,
    RDV_DUP_RANK = 4,
    RDV_ABORTED = 5
};

typedef struct rdv {
    const char *addr;
    int port;
    int rank, world;
    double deadline; /* CLOCK_MONOTONIC seconds; 0 = none */
    double timeout_s;
    char where[300]; /* "rendezvous at ADDR:PORT", the prefix of every message */
} rdv;

#define RDV_FAIL(r, status, ...) gptx_fail((status), (r)->where, __VA_ARGS__)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Milliseconds left for poll(): -1 = no deadline, 0 = expired. */
static int ms_left(const rdv *r) {
    if (r->deadline == 0) return -1;
    double left = r->deadline - now_s();
    if (left <= 0) return 0;
    return left > 1e6 ? 1000000000 : (int)(left * 1000.0) + 1;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (24 - 8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static void put_u64(unsigned char *p, uint64_t v) {
    put_u32(p, (uint32_t)(v >> 32));
    put_u32(p + 4, (uint32_t)v);
}
static uint64_t get_u64(const unsigned char *p) {
    return (uint64_t)get_u32(p) << 32 | get_u32(p + 4);
}

static int set_nonblocking(int fd) {
    int fl = fcntl(fd, F_GETFL, 0);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Waits until fd is ready for `events`; 0 ready, 1 deadline passed, -1 error. */
static int wait_fd(const rdv *r, int fd, short events) {
    for (;;) {
        int ms = ms_left(r);
        if (ms == 0) return 1;
        struct pollfd p = {fd, events, 0};
        int n = poll(&p, 1, ms);
        if (n > 0) return 0;
        if (n < 0 && errno != EINTR) return -1;
    }
}

/* Sends or receives exactly len bytes before the deadline.
 * 0 done, 1 deadline passed, -1 error (errno set; 0 = peer closed). */
static int xfer(const rdv *r, int fd, void *buf, size_t len, int sending) {
    unsigned char *p = buf;
    while (len > 0) {
        int w = wait_fd(r, fd, sending ? POLLOUT : POLLIN);
        if (w) return w;
        ssize_t n = sending ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n == 0) {
            errno = 0;
            return -1;
        } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
            return -1;
        }
    }
    return 0;
}

static int resolve(const rdv *r, int passive, struct addrinfo **res) {
    char port[16];
    snprintf(port, sizeof port, "%d", r->port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    int rc = getaddrinfo(r->addr, port, &hints, res);
    if (rc != 0)
        return RDV_FAIL(r, GPTX_ERR_INVALID, "MASTER_ADDR '%s' does not resolve: %s", r->addr,
                        gai_strerror(rc));
    return GPTX_OK;
}

static const char *status_text(uint32_t s) {
    switch (s) {
    case RDV_BAD_WORLD:
        return "the ranks disagree on WORLD_SIZE";
    case RDV_BAD_LEN:
        return "the ranks disagree on the blob size";
    case RDV_BAD_RANK:
        return "a rank outside [0, WORLD_SIZE) connected";
    case RDV_DUP_RANK:
        return "two processes claim the same RANK";
    case RDV_ABORTED:
        return "rank 0 gave up (see its error)";
    default:
        return "unknown failure";
    }
}

/* ---- rank 0 --------------------------------------------------------------- */

static int listen_socket(const rdv *r, int *out) {
    struct addrinfo *res = NULL;
    GPTX_TRY(resolve(r, 1, &res));
    int fd = -1, err = 0;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, r->world) != 0 ||
            set_nonblocking(fd) != 0) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        return RDV_FAIL(r, GPTX_ERR_BACKEND, "rank 0 cannot listen there: %s%s", strerror(err),
                        err == EADDRNOTAVAIL ? " (MASTER_ADDR must be an address of rank 0's host)"
                        : err == EADDRINUSE  ? " (another process uses the port)"
                                             : "");
    *out = fd;
    return GPTX_OK;
}

/* Tells every connected peer that the rendezvous failed, then closes them. */
static void abort_peers(const rdv *r, int *fds, uint32_t status) {
    rdv quick = *r;
    quick.deadline = now_s() + 1.0; /* never wait long for a peer that is already failing */
    for (int i = 1; i < r->world; i++) {
        if (fds[i] < 0) continue;
        unsigned char reply[RDV_REPLY_BYTES];
        put_u32(reply, RDV_MAGIC);
        put_u32(reply + 4, status);
        (void)xfer(&quick, fds[i], reply, sizeof reply, 1);
        close(fds[i]);
        fds[i] = -1;
    }
}

static int missing_ranks(const rdv *r, const int *fds, char *buf, size_t n) {
    size_t used = 0;
    int count = 0;
    buf[0] = '\0';
    for (int i = 1; i < r->world; i++) {
        if (fds[i] >= 0) continue;
        count++;
        if (used + 16 < n)
            used += (size_t)snprintf(buf + used, n - used, "%s%d", count > 1 ? ", " : "", i);
    }
    return count;
}

static int serve(const rdv *r, const void *blob, size_t len, unsigned char *all) {
    int lfd = -1;
    GPTX_TRY(listen_socket(r, &lfd));
    int *fds = malloc((size_t)r->world * sizeof *fds);
    if (!fds) {
        close(lfd);
        return RDV_FAIL(r, GPTX_ERR_NO_MEMORY, "out of host memory");
    }
    for (int i = 0; i < r->world; i++) fds[i] = -1;
    memcpy(all, blob, len);
    int rc = GPTX_OK, joined = 1;
    uint32_t fail_status = RDV_ABORTED;
    while (joined < r->world && rc == GPTX_OK) {
        int w = wait_fd(r, lfd, POLLIN);
        if (w == 1) {
            char list[256];
            int n = missing_ranks(r, fds, list, sizeof list);
            rc = RDV_FAIL(r, GPTX_ERR_BACKEND,
                          "%d of %d rank(s) did not connect within %g s (missing: %s); check that "
                          "every rank was started with the same MASTER_ADDR, MASTER_PORT and "
                          "WORLD_SIZE",
                          n, r->world, r->timeout_s, list);
            break;
        }
        int fd = w == 0 ? accept(lfd, NULL, NULL) : -1;
        if (fd < 0) {
            if (w == 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
                           errno == ECONNABORTED))
                continue;
            rc = RDV_FAIL(r, GPTX_ERR_BACKEND, "accept failed: %s", strerror(errno));
            break;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        unsigned char hello[RDV_HELLO_BYTES];
        if (set_nonblocking(fd) != 0 || xfer(r, fd, hello, sizeof hello, 0) != 0 ||
            get_u32(hello) != RDV_MAGIC || get_u32(hello + 4) != RDV_VERSION) {
            close(fd); /* not one of ours (or gone): keep waiting for the real ranks */
            continue;
        }
        uint32_t peer = get_u32(hello + 8), world = get_u32(hello + 12), status = RDV_OK;
        uint64_t plen = get_u64(hello + 16);
        if (world != (uint32_t)r->world)
            status = RDV_BAD_WORLD;
        else if (plen != len)
            status = RDV_BAD_LEN;
        else if (peer == 0 || peer >= world)
            status = RDV_BAD_RANK;
        else if (fds[peer] >= 0)
            status = RDV_DUP_RANK;
        if (status != RDV_OK) {
            int one_fd[2] = {-1, fd}; /* answer the offending peer like the others */
            rdv single = *r;
            single.world = 2;
            abort_peers(&single, one_fd, status);
            fail_status = status;
            rc =
                RDV_FAIL(r, GPTX_ERR_MISMATCH,
                         "%s (a peer sent rank %u, world size %u, blob %llu bytes; rank 0 has "
                         "world size %d, blob %zu bytes)",
                         status_text(status), peer, world, (unsigned long long)plen, r->world, len);
            break;
        }
        if (xfer(r, fd, all + (size_t)peer * len, len, 0) != 0) {
            close(fd);
            continue;
        }
        fds[peer] = fd;
        joined++;
    }
    close(lfd);
    if (rc != GPTX_OK) {
        abort_peers(r, fds, fail_status);
        free(fds);
        return rc;
    }
    unsigned char reply[RDV_REPLY_BYTES];
    put_u32(reply, RDV_MAGIC);
    put_u32(reply + 4, RDV_OK);
    for (int i = 1; i < r->world && rc == GPTX_OK; i++) {
        if (xfer(r, fds[i], reply, sizeof reply, 1) != 0 ||
            xfer(r, fds[i], all, (size_t)r->world * len, 1) != 0)
            rc = RDV_FAIL(r, GPTX_ERR_BACKEND, "sending the result to rank %d failed (%s)", i,
                          errno ? strerror(errno) : "timed out or closed");
    }
    for (int i = 1; i < r->world; i++)
        if (fds[i] >= 0) close(fds[i]);
    free(fds);
    return rc;
}

/* ---- ranks 1.. ------------------------------------------------------------ */

int gptx_comm_socket_connected_to_itself(int fd) {
    struct sockaddr_storage self, peer;
    socklen_t ls = sizeof self, lp = sizeof peer;
    memset(&self, 0, sizeof self);
    memset(&peer, 0, sizeof peer);
    if (getsockname(fd, (struct sockaddr *)&self, &ls) != 0 ||
        getpeername(fd, (struct sockaddr *)&peer, &lp) != 0 || ls != lp)
        return 0;
    return memcmp(&self, &peer, ls) == 0;
}

/* Connects to rank 0, retrying while it is not listening yet. */
static int connect_root(const rdv *r, int *out) {
    int backoff = 20, last_err = 0;
    for (;;) {
        struct addrinfo *res = NULL;
        GPTX_TRY(resolve(r, 0, &res));
        for (struct addrinfo *a = res; a; a = a->ai_next) {
            int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
            if (fd < 0) {
                last_err = errno;
                continue;
            }
            if (set_nonblocking(fd) != 0) {
                last_err = errno;
                close(fd);
                continue;
            }
            int c = connect(fd, a->ai_addr, a->ai_addrlen);
            if (c != 0 && errno == EINPROGRESS) {
                rdv step = *r;
                double cap = now_s() + 2.0; /* re-resolve and retry after 2 s at most */
                if (step.deadline == 0 || cap < step.deadline) step.deadline = cap;
                int w = wait_fd(&step, fd, POLLOUT);
                int soerr = 0;
                socklen_t sl = sizeof soerr;
                if (w == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)
                    c = 0;
                else if (w == 1)
                    c = -2; /* this attempt ran out of time: keep the last real error */
                else
                    errno = soerr ? soerr : errno;
            }
            /* Nobody listening on a port in the ephemeral range: the kernel may pick
             * that very port as our source port and connect the socket to itself
             * (TCP simultaneous open). That is "refused", not rank 0. */
            if (c == 0 && gptx_comm_socket_connected_to_itself(fd)) {
                c = -1;
                errno = ECONNREFUSED;
            }
            if (c == 0) {
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                freeaddrinfo(res);
                *out = fd;
                return GPTX_OK;
            }
            if (c != -2) last_err = errno;
            close(fd);
        }
        freeaddrinfo(res);
        if (ms_left(r) == 0)
            return RDV_FAIL(
                r, GPTX_ERR_BACKEND,
                "rank %d could not reach rank 0 within %g s (last error: %s); is rank 0 "
                "running, with the same MASTER_ADDR and MASTER_PORT?",
                r->rank, r->timeout_s, last_err ? strerror(last_err) : "timed out");
        int ms = ms_left(r);
        sleep_ms(ms < 0 || ms > backoff ? backoff : ms);
        if (backoff < 500) backoff *= 2;
    }
}

static int join(const rdv *r, const void *blob, size_t len, unsigned char *all) {
    int fd = -1;
    GPTX_TRY(connect_root(r, &fd));
    unsigned char hello[RDV_HELLO_BYTES], reply[RDV_REPLY_BYTES];
    put_u32(hello, RDV_MAGIC);
    put_u32(hello + 4, RDV_VERSION);
    put_u32(hello + 8, (uint32_t)r->rank);
    put_u32(hello + 12, (uint32_t)r->world);
    put_u64(hello + 16, (uint64_t)len);
    int rc = GPTX_OK;
    int x = xfer(r, fd, hello, sizeof hello, 1);
    if (x == 0) x = xfer(r, fd, (void *)(uintptr_t)blob, len, 1);
    if (x == 0) x = xfer(r, fd, reply, sizeof reply, 0);
    if (x == 1) {
        rc = RDV_FAIL(r, GPTX_ERR_BACKEND,
                      "rank %d got no answer from rank 0 (timed out; timeout %g s): not every "
                      "rank has joined, or rank 0 failed",
                      r->rank, r->timeout_s);
    } else if (x != 0) {
        rc = RDV_FAIL(r, GPTX_ERR_BACKEND,
                      "rank %d: the connection to rank 0 ended without an answer (%s): rank 0 "
                      "failed, or another program may be listening at MASTER_PORT",
                      r->rank, errno ? strerror(errno) : "closed by the peer");
    } else if (get_u32(reply) != RDV_MAGIC) {
        rc = RDV_FAIL(r, GPTX_ERR_BACKEND, "the listener is not a gptx rank 0");
    } else if (get_u32(reply + 4) != RDV_OK) {
        uint32_t s = get_u32(reply + 4);
        rc = RDV_FAIL(r, s == RDV_ABORTED ? GPTX_ERR_BACKEND : GPTX_ERR_MISMATCH,
                      "rank 0 refused rank %d of world size %d: %s", r->rank, r->world,
                      status_text(s));
    } else if ((x = xfer(r, fd, all, (size_t)r->world * len, 0)) != 0) {
        rc = RDV_FAIL(r, GPTX_ERR_BACKEND, "rank %d lost rank 0 while receiving the result (%s)",
                      r->rank, x == 1 ? "timed out" : "connection closed");
    }
    close(fd);
    return rc;
}

int gptx_comm_rendezvous_allgather(const char *addr, int port, int rank, int world_size,
                                   const void *blob, size_t len, void *all, double timeout_s) {
    GPTX_CHECK_NULL(addr);
    GPTX_CHECK_NULL(all);
    if (len > 0) GPTX_CHECK_NULL(blob);
    const char *fn = "rendezvous";
    if (!addr[0]) return gptx_fail(GPTX_ERR_INVALID, fn, "MASTER_ADDR is empty");
    if (port < 1 || port > 65535)
        return gptx_fail(GPTX_ERR_INVALID, fn, "MASTER_PORT is %d; must be in [1, 65535]", port);
    if (world_size < 1 || rank < 0 || rank >= world_size)
        return gptx_fail(GPTX_ERR_INVALID, fn,
                         "rank %d, world size %d: need 0 <= rank < world size", rank, world_size);
    if (len > RDV_MAX_BLOB || (size_t)world_size > SIZE_MAX / (len ? len : 1))
        return gptx_fail(GPTX_ERR_INVALID, fn, "blob of %zu bytes is too large (at most %u)", len,
                         RDV_MAX_BLOB);
    if (!(timeout_s >= 0) || timeout_s > 1e9)
        return gptx_fail(GPTX_ERR_INVALID, fn, "timeout %g s; must be in [0, 1e9]", timeout_s);
    if (world_size == 1) {
        if (len) memcpy(all, blob, len);
        return GPTX_OK;
    }
    rdv r = {addr, port, rank, world_size, timeout_s > 0 ? now_s() + timeout_s : 0, timeout_s, ""};
    snprintf(r.where, sizeof r.where, "rendezvous at %s:%d", addr, port);
    return rank == 0 ? serve(&r, blob, len, all) : join(&r, blob, len, all);
}
