/* The run state's error rules, its end, and the clocks every stage reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "train_dp.h"
#include "train_run.h"

int run_fail(const train_run *run, int rc) {
    fprintf(stderr, "%sgptx-train%s: %s (%s)\n", prog_error_lead(), run->rank_label,
            prog_error_text(), gptx_status_name(rc));
    return -1;
}

int run_agree(const train_run *run, int ok, const char *what) {
    if (run->world > 1 ? dp_agree(run->comm, ok, what) != GPTX_OK : !ok) return -1;
    return 0;
}

int run_settle(const train_run *run, int rc, const char *what) {
    if (rc != GPTX_OK)
        fprintf(stderr, "%sgptx-train%s: %s while %s (%s)\n", prog_error_lead(), run->rank_label,
                prog_error_text(), what, gptx_status_name(rc));
    return run_agree(run, rc == GPTX_OK, what);
}

int run_note_input(train_run *run, const char *flag, const char *path) {
    struct stat st;
    outdir_inputs *in = &run->inputs;
    if (stat(path, &st) != 0) return 0; /* reading it says what is wrong */
    if (in->n == in->cap) {
        int cap = in->cap ? 2 * in->cap : 16;
        outdir_input *ids = realloc(in->ids, (size_t)cap * sizeof *ids);
        if (!ids) return fprintf(stderr, "gptx-train: out of memory\n"), -1;
        in->ids = ids;
        in->cap = cap;
    }
    char *copy = strdup(path);
    if (!copy) return fprintf(stderr, "gptx-train: out of memory\n"), -1;
    in->ids[in->n++] = (outdir_input){st.st_dev, st.st_ino, flag, copy};
    return 0;
}

int run_own_path(const train_run *run, const char *path) {
    return run_agree(run, run->rank != 0 || outdir_unlink_link(path) == 0, "replacing a link");
}

/* Frees whatever the stages opened (each handle may still be NULL) and
 * returns the exit status: 1 instead of success when the metrics file
 * could not be written completely. */
int run_close(train_run *run) {
    int status = run->status;
    if (train_report_close(&run->rep) != 0 && (status == 0 || status > 128)) status = 1;
    gptx_timer_destroy(run->step_timer);
    gptx_timer_destroy(run->e2e_timer);
    gptx_sampler_destroy(run->sampler);
    gptx_optimizer_destroy(run->opt);
    gptx_model_destroy(run->model);
    gptx_dataloader_destroy(run->train);
    gptx_dataloader_destroy(run->val);
    gptx_tokenizer_destroy(run->tok);
    gptx_comm_destroy(run->comm);
    gptx_context_destroy(run->ctx);
    free_paths(run->train_paths, run->n_train_paths);
    free_paths(run->val_paths, run->n_val_paths);
    free(run->tokens);
    free(run->text);
    free(run->saved);
    free(run->saved_flags);
    free(run->record);
    free(run->resume_folder);
    for (int i = 0; i < run->inputs.n; i++) free((char *)run->inputs.ids[i].path);
    free(run->inputs.ids);
    ckpt_candidates_free(&run->resume_list);
    return status;
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A timer report over all ranks: times are the slowest rank's, token counts
 * the sum, so tokens/s is global tokens over the slowest rank's time. */
int global_timing(gptx_comm *comm, gptx_timer_report *r) {
    double slowest[5] = {r->cold_seconds, r->steady_seconds, r->steady_median_seconds,
                         r->steady_min_seconds, r->steady_max_seconds};
    double sum[2] = {(double)r->cold_tokens, (double)r->steady_tokens};
    int rc = gptx_comm_allreduce_f64(comm, slowest, 5, GPTX_COMM_MAX);
    if (!rc) rc = gptx_comm_allreduce_f64(comm, sum, 2, GPTX_COMM_SUM);
    if (rc) return rc;
    r->cold_seconds = slowest[0];
    r->steady_seconds = slowest[1];
    r->steady_median_seconds = slowest[2];
    r->steady_min_seconds = slowest[3];
    r->steady_max_seconds = slowest[4];
    r->cold_tokens = (int64_t)sum[0];
    r->steady_tokens = (int64_t)sum[1];
    r->steady_tokens_per_second = r->steady_seconds > 0 ? sum[1] / r->steady_seconds : 0;
    return GPTX_OK;
}
