/* The TCP rendezvous with real local processes (fork) on 127.0.0.1: 2 and 3
 * ranks exchange blobs whatever order they start in; a missing rank, a
 * missing rank 0 and disagreeing ranks fail within the timeout with a
 * message that names the problem. */
#define _POSIX_C_SOURCE 200809L

#include <netinet/in.h>
#include <signal.h>
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

/* A port the kernel just handed out, free again (reused soon after: a race
 * only with other programs binding ports at the same moment). */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
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
    int rc = comm_rendezvous_allgather("127.0.0.1", port, p->rank, p->world, mine, p->len, all,
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
 * the slowest one took. */
static int run_ranks(const rank_plan *plans, int n, double timeout, double *seconds) {
    int port = free_port();
    if (port <= 0) return n;
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
    return bad;
}

#define OK_RANK(r, w, delay) {(r), (w), BLOB, (delay), GPTX_OK, NULL}

int main(void) {
    double s = 0;
    /* 2 and 3 ranks; rank 0 last, so the others must retry the connection */
    rank_plan two[] = {OK_RANK(0, 2, 0), OK_RANK(1, 2, 0)};
    CHECK(run_ranks(two, 2, 10, &s) == 0);
    rank_plan three[] = {OK_RANK(2, 3, 0), OK_RANK(1, 3, 50), OK_RANK(0, 3, 300)};
    CHECK(run_ranks(three, 3, 10, &s) == 0);
    rank_plan one[] = {OK_RANK(0, 1, 0)}; /* world size 1: no socket at all */
    CHECK(run_ranks(one, 1, 1, &s) == 0);

    /* world size 3 but rank 2 never comes: rank 0 names it, rank 1 hears of it */
    rank_plan missing[] = {{0, 3, BLOB, 0, GPTX_ERR_BACKEND, "missing: 2"},
                           {1, 3, BLOB, 0, GPTX_ERR_BACKEND, "rank 0"}};
    CHECK(run_ranks(missing, 2, 1.0, &s) == 0);
    CHECK(s < 4.0);
    printf("missing rank detected after %.2f s (timeout 1 s)\n", s);

    /* no rank 0 at all */
    rank_plan no_root[] = {{1, 2, BLOB, 0, GPTX_ERR_BACKEND, "could not reach rank 0"}};
    CHECK(run_ranks(no_root, 1, 0.5, &s) == 0);
    CHECK(s < 3.0);

    /* ranks that disagree are refused, on both sides */
    rank_plan worlds[] = {{0, 2, BLOB, 0, GPTX_ERR_MISMATCH, "WORLD_SIZE"},
                          {1, 3, BLOB, 0, GPTX_ERR_MISMATCH, "WORLD_SIZE"}};
    CHECK(run_ranks(worlds, 2, 5, &s) == 0);
    rank_plan lens[] = {{0, 2, BLOB, 0, GPTX_ERR_MISMATCH, "blob"},
                        {1, 2, BLOB - 1, 0, GPTX_ERR_MISMATCH, "blob"}};
    CHECK(run_ranks(lens, 2, 5, &s) == 0);
    rank_plan dup[] = {{0, 3, BLOB, 0, GPTX_ERR_MISMATCH, "same RANK"},
                       {1, 3, BLOB, 0, GPTX_ERR_MISMATCH, "same RANK"},
                       {1, 3, BLOB, 100, GPTX_ERR_MISMATCH, "same RANK"}};
    CHECK(run_ranks(dup, 3, 5, &s) == 0);

    /* argument errors, no process needed */
    unsigned char b[BLOB], all[2 * BLOB];
    CHECK_STATUS(comm_rendezvous_allgather("127.0.0.1", 0, 0, 2, b, BLOB, all, 1),
                 GPTX_ERR_INVALID);
    CHECK_STATUS(comm_rendezvous_allgather("127.0.0.1", 70000, 0, 2, b, BLOB, all, 1),
                 GPTX_ERR_INVALID);
    CHECK_STATUS(comm_rendezvous_allgather("127.0.0.1", 5000, 2, 2, b, BLOB, all, 1),
                 GPTX_ERR_INVALID);
    CHECK_STATUS(comm_rendezvous_allgather("", 5000, 0, 2, b, BLOB, all, 1), GPTX_ERR_INVALID);
    CHECK_STATUS(comm_rendezvous_allgather(NULL, 5000, 0, 2, b, BLOB, all, 1), GPTX_ERR_NULL);
    CHECK_STATUS(comm_rendezvous_allgather("127.0.0.1", 5000, 0, 2, b, BLOB, all, -1),
                 GPTX_ERR_INVALID);
    CHECK_STATUS(comm_rendezvous_allgather("no-such-host.invalid", 5000, 1, 2, b, BLOB, all, 1),
                 GPTX_ERR_INVALID);
    return check_exit("test_rendezvous");
}
