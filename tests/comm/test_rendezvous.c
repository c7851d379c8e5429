/* The TCP rendezvous with real local processes (fork) on 127.0.0.1: 2 and 3
 * ranks exchange blobs whatever order they start in; a missing rank, a
 * missing rank 0 and disagreeing ranks fail within the timeout with a
 * message that names the problem.
 *
 *   test_rendezvous --one ADDR PORT RANK WORLD TIMEOUT
 * runs one rank against rank 0 at ADDR:PORT and prints "rank R: ok after S s"
 * (exit 0, every blob as expected) or "rank R: failed after S s: MESSAGE"
 * (exit 1): tests/comm/netns_hosts.sh runs the ranks on separate hosts. */
#define _POSIX_C_SOURCE 200809L

#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "comm_internal.h"

#define BLOB 40

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Binds a fresh loopback TCP socket to port (0 = any); the fd, or -1. */
static int bind_loopback(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((unsigned short)port);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A free port *below* the kernel's ephemeral range, bound (not listening) by
 * the returned *fd so nothing else can take it. Ports from bind(0) would be
 * ephemeral ones: other programs running beside the test (mpirun's daemons,
 * in CI) get their listening ports from the same range and may take the port
 * between our check and its use, and a connect() to an unused ephemeral
 * port can connect to itself. */
static int reserve_port(int *fd) {
    int lo = 32768, hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2) lo = 32768;
        fclose(f);
    }
    int first = lo > 12000 ? lo - 10000 : 1024, span = lo > first ? lo - first : 1;
    static unsigned seed;
    if (!seed) seed = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL);
    for (int tries = 0; tries < 200; tries++) {
        seed = seed * 1103515245u + 12345u;
        int port = first + (int)((seed >> 8) % (unsigned)span);
        *fd = bind_loopback(port);
        if (*fd >= 0) return port;
    }
    return -1;
}

static void make_blob(unsigned char *b, int rank) {
    for (int i = 0; i < BLOB; i++) b[i] = (unsigned char)(rank * 31 + i * 7 + 1);
}

/* What one child process should see. */
typedef struct rank_plan {
    int rank, world;     /* world as this rank believes it */
    size_t len;          /* blob size it sends */
    int delay_ms;        /* start late */
    int want;            /* expected status */
    const char *needle;  /* expected in the message on failure */
} rank_plan;

/* Child: runs one rank; exit code 0 = behaved as planned. */
static int run_rank(const rank_plan *p, int port, double timeout) {
    if (p->delay_ms) {
        struct timespec ts = {p->delay_ms / 1000, (long)(p->delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    unsigned char mine[BLOB + 8], all[8 * (BLOB + 8)];
    make_blob(mine, p->rank);
    int rc = gptx_comm_rendezvous_allgather("127.0.0.1", port, p->rank, p->world, mine, p->len, all,
                                            timeout);
    if (rc != p->want) {
        fprintf(stderr, "rank %d: status %s, expected %s (%s)\n", p->rank, gptx_status_name(rc),
                gptx_status_name(p->want), gptx_last_error());
        return 1;
    }
    if (rc != GPTX_OK) {
        if (p->needle && !strstr(gptx_last_error(), p->needle)) {
            fprintf(stderr, "rank %d: message '%s' lacks '%s'\n", p->rank, gptx_last_error(),
                    p->needle);
            return 1;
        }
        printf("rank %d: expected failure: %s\n", p->rank, gptx_last_error());
        return 0;
    }
    for (int r = 0; r < p->world; r++) {
        unsigned char want[BLOB];
        make_blob(want, r);
        if (memcmp(all + (size_t)r * p->len, want, p->len) != 0) {
            fprintf(stderr, "rank %d: blob of rank %d differs\n", p->rank, r);
            return 1;
        }
    }
    return 0;
}

/* Forks one process per plan; returns how many misbehaved, and the seconds
 * the slowest one took. keep_port_bound: hold the port (bound, not listening)
 * while the ranks run, so a connect() is refused for sure; else it is released
 * for rank 0 just before the fork. */
static int run_ranks(const rank_plan *plans, int n, double timeout, double *seconds,
                     int keep_port_bound) {
    int held = -1;
    int port = reserve_port(&held);
    if (port <= 0) {
        fprintf(stderr, "no free loopback port below the ephemeral range\n");
        return n;
    }
    if (!keep_port_bound) {
        close(held);
        held = -1;
    }
    pid_t pids[8];
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        fflush(NULL);
        pids[i] = fork();
        if (pids[i] == 0) exit(run_rank(&plans[i], port, timeout));
    }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int st = 0;
        if (pids[i] < 0 || waitpid(pids[i], &st, 0) != pids[i] || !WIFEXITED(st) ||
            WEXITSTATUS(st) != 0)
            bad++;
    }
    *seconds = now_s() - t0;
    if (held >= 0) close(held);
    return bad;
}

/* A connect() to a bound port nobody listens on, from a socket bound to that
 * same port: Linux connects the socket to itself. The rendezvous must see it. */
static void check_self_connect_detection(void) {
    int held = -1;
    int port = reserve_port(&held);
    CHECK(port > 0);
    if (port <= 0) return;
    close(held);
    int fd = bind_loopback(port);
    CHECK(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((unsigned short)port);
    CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(gptx_comm_socket_connected_to_itself(fd) == 1);
    close(fd);

    /* an ordinary connection is not */
    int lfd = reserve_port(&held) > 0 ? held : -1;
    CHECK(lfd >= 0 && listen(lfd, 1) == 0);
    socklen_t len = sizeof a;
    CHECK(getsockname(lfd, (struct sockaddr *)&a, &len) == 0);
    int cfd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(connect(cfd, (struct sockaddr *)&a, sizeof a) == 0);
    int afd = accept(lfd, NULL, NULL);
    CHECK(afd >= 0);
    CHECK(gptx_comm_socket_connected_to_itself(cfd) == 0);
    CHECK(gptx_comm_socket_connected_to_itself(afd) == 0);
    close(afd);
    close(cfd);
    close(lfd);
}

/* Another program listens at the port, accepts rank 1 and hangs up: rank 1
 * fails at once and says that something else may own MASTER_PORT. */
static void check_foreign_listener(void) {
    int lfd = -1;
    int port = reserve_port(&lfd);
    CHECK(port > 0 && listen(lfd, 1) == 0);
    if (port <= 0) return;
    rank_plan plan = {1, 2, BLOB, 0, GPTX_ERR_BACKEND, "another program may be listening"};
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) exit(run_rank(&plan, port, 5));
    int afd = accept(lfd, NULL, NULL);
    CHECK(afd >= 0);
    if (afd >= 0) close(afd);
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(lfd);
}

#define OK_RANK(r, w, delay) {(r), (w), BLOB, (delay), GPTX_OK, NULL}

/* --one: a single rank, on whatever host the caller started it. */
static int one_rank(char **argv) {
    const char *addr = argv[0];
    int port = atoi(argv[1]), rank = atoi(argv[2]), world = atoi(argv[3]);
    double timeout = atof(argv[4]);
    if (world < 1 || world > 8) {
        fprintf(stderr, "test_rendezvous --one: WORLD must be 1..8\n");
        return 2;
    }
    unsigned char mine[BLOB], all[8 * BLOB];
    make_blob(mine, rank);
    double t0 = now_s();
    int rc = gptx_comm_rendezvous_allgather(addr, port, rank, world, mine, BLOB, all, timeout);
    double secs = now_s() - t0;
    if (rc != GPTX_OK) {
        printf("rank %d: failed after %.2f s: %s (%s)\n", rank, secs, gptx_last_error(),
               gptx_status_name(rc));
        return 1;
    }
    for (int r = 0; r < world; r++) {
        unsigned char want[BLOB];
        make_blob(want, r);
        if (memcmp(all + (size_t)r * BLOB, want, BLOB) != 0) {
            printf("rank %d: failed after %.2f s: blob of rank %d differs\n", rank, secs, r);
            return 1;
        }
    }
    printf("rank %d: ok after %.2f s\n", rank, secs);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 7 && !strcmp(argv[1], "--one")) return one_rank(argv + 2);
    if (argc != 1) {
        fprintf(stderr, "usage: test_rendezvous [--one ADDR PORT RANK WORLD TIMEOUT]\n");
        return 2;
    }
    double s = 0;
    /* 2 and 3 ranks; rank 0 last, so the others must retry the connection */
    rank_plan two[] = {OK_RANK(0, 2, 0), OK_RANK(1, 2, 0)};
    CHECK(run_ranks(two, 2, 10, &s, 0) == 0);
    rank_plan three[] = {OK_RANK(2, 3, 0), OK_RANK(1, 3, 50), OK_RANK(0, 3, 300)};
    CHECK(run_ranks(three, 3, 10, &s, 0) == 0);
    rank_plan one[] = {OK_RANK(0, 1, 0)}; /* world size 1: no socket at all */
    CHECK(run_ranks(one, 1, 1, &s, 0) == 0);

    /* world size 3 but rank 2 never comes: rank 0 names it, rank 1 hears of it */
    rank_plan missing[] = {{0, 3, BLOB, 0, GPTX_ERR_BACKEND, "missing: 2"},
                           {1, 3, BLOB, 0, GPTX_ERR_BACKEND, "rank 0"}};
    CHECK(run_ranks(missing, 2, 1.0, &s, 0) == 0);
    CHECK(s < 4.0);
    printf("missing rank detected after %.2f s (timeout 1 s)\n", s);

    /* no rank 0 at all */
    rank_plan no_root[] = {{1, 2, BLOB, 0, GPTX_ERR_BACKEND, "could not reach rank 0"}};
    CHECK(run_ranks(no_root, 1, 0.5, &s, 1) == 0);
    CHECK(s < 3.0);

    check_self_connect_detection();
    check_foreign_listener();

    /* ranks that disagree are refused, on both sides */
    rank_plan worlds[] = {{0, 2, BLOB, 0, GPTX_ERR_MISMATCH, "WORLD_SIZE"},
                          {1, 3, BLOB, 0, GPTX_ERR_MISMATCH, "WORLD_SIZE"}};
    CHECK(run_ranks(worlds, 2, 5, &s, 0) == 0);
    rank_plan lens[] = {{0, 2, BLOB, 0, GPTX_ERR_MISMATCH, "blob"},
                        {1, 2, BLOB - 1, 0, GPTX_ERR_MISMATCH, "blob"}};
    CHECK(run_ranks(lens, 2, 5, &s, 0) == 0);
    rank_plan dup[] = {{0, 3, BLOB, 0, GPTX_ERR_MISMATCH, "same RANK"},
                       {1, 3, BLOB, 0, GPTX_ERR_MISMATCH, "same RANK"},
                       {1, 3, BLOB, 100, GPTX_ERR_MISMATCH, "same RANK"}};
    CHECK(run_ranks(dup, 3, 5, &s, 0) == 0);

    /* argument errors, no process needed */
    unsigned char b[BLOB], all[2 * BLOB];
    CHECK_STATUS(gptx_comm_rendezvous_allgather("127.0.0.1", 0, 0, 2, b, BLOB, all, 1),
                 GPTX_ERR_INVALID);
    CHECK_STATUS(gptx_comm_rendezvous_allgather("127.0.0.1", 70000, 0, 2, b, BLOB, all, 1),
                 GPTX_ERR_INVALID);
    CHECK_STATUS(gptx_comm_rendezvous_allgather("127.0.0.1", 5000, 2, 2, b, BLOB, all, 1),
                 GPTX_ERR_INVALID);
    CHECK_STATUS(gptx_comm_rendezvous_allgather("", 5000, 0, 2, b, BLOB, all, 1), GPTX_ERR_INVALID);
    CHECK_STATUS(gptx_comm_rendezvous_allgather(NULL, 5000, 0, 2, b, BLOB, all, 1), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_comm_rendezvous_allgather("127.0.0.1", 5000, 0, 2, b, BLOB, all, -1),
                 GPTX_ERR_INVALID);
    CHECK_STATUS(
        gptx_comm_rendezvous_allgather("no-such-host.invalid", 5000, 1, 2, b, BLOB, all, 1),
        GPTX_ERR_INVALID);
    return check_exit("test_rendezvous");
}
