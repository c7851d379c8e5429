/* gptx-train's run configuration: the flags, the launcher, the record each
 * checkpoint stores, and what a resumed run checks against that record. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_outdir.h"
#include "train_run.h"

/* The first line of the run configuration gptx-train stores in its
 * checkpoints (user metadata): its format, in case it ever changes. */
#define SAVED_MAGIC "gptx-train run configuration 1"

/* --resume: o becomes the configuration saved in the checkpoint, with the
 * flags of the command line a resumed run may change. *saved gets the whole
 * record (for data_hash, world_size, best_val_loss), *flags the copy o's
 * strings point into; both stay allocated until the end. 0, or -1 after a
 * message. */
static int resume_config(train_options *o, char **saved, char **flags) {
    const train_options cli = *o;
    if (o->init_from) {
        fprintf(stderr, "gptx-train: --resume and --init-from exclude each other (--resume "
                        "continues a run, --init-from starts a new one from a model)\n");
        return -1;
    }
    size_t n = 0;
    int rc = gptx_checkpoint_user_metadata(o->resume, NULL, 0, &n);
    if (rc == GPTX_ERR_SHAPE) {
        *saved = malloc(n + 1);
        *flags = malloc(n + 1);
        rc = *saved && *flags ? gptx_checkpoint_user_metadata(o->resume, *saved, n + 1, &n)
                              : GPTX_ERR_NO_MEMORY;
    }
    if (rc == GPTX_ERR_NOT_FOUND) {
        fprintf(stderr, "gptx-train: --resume %s: %s; --resume takes the checkpoint.safetensors "
                        "of a gptx-train 0.3 (or later) run, which holds its configuration "
                        "(--init-from starts a new run from any model's weights)\n", o->resume,
                prog_error_text());
        return -1;
    }
    if (rc != GPTX_OK) {
        fprintf(stderr, "gptx-train: --resume %s: %s (%s)\n", o->resume,
                rc == GPTX_ERR_NO_MEMORY ? "out of memory" : prog_error_text(),
                gptx_status_name(rc));
        return -1;
    }
    if (strncmp(*saved, SAVED_MAGIC "\n", strlen(SAVED_MAGIC) + 1) != 0) {
        fprintf(stderr, "gptx-train: --resume %s: its metadata is not a gptx-train run "
                        "configuration (no \"" SAVED_MAGIC "\" line)\n", o->resume);
        return -1;
    }
    memcpy(*flags, *saved, n + 1);
    return train_options_resume(o, &cli, *flags, cli.resume);
}

/* The options (--help and --version end the run with status 0, a bad flag
 * with 2), --resume's saved configuration, and what the launcher (if any)
 * decides: rank, device and the default thread count. */
int run_parse(train_run *run, int argc, char **argv) {
    run->status = 2;
    int prc = train_options_parse(&run->o, argc, argv);
    if (prc) {
        if (prc > 0) run->status = 0;
        return -1;
    }
    if (run->o.resume && resume_config(&run->o, &run->saved, &run->saved_flags) != 0)
        return -1;
    gptx_comm_launch_info_init(&run->launch);
    if (gptx_comm_detect_launch(&run->launch) != GPTX_OK) {
        fprintf(stderr, "gptx-train: %s\n", gptx_last_error());
        return -1;
    }
    outdir_new_run_id(run->run_id); /* a resumed run takes its checkpoint's (run_check_saved) */
    run->status = 1; /* from here on, any failure */
    return 0;
}

const char *schedule_name(lr_schedule s) {
    return s == SCHEDULE_COSINE ? "cosine" : s == SCHEDULE_LINEAR ? "linear" : "constant";
}

/* The run configuration for the checkpoint: the flags, then what identifies
 * the run's data and its progress. NULL when out of memory. */
char *run_record(const train_run *run) {
    const train_options *o = &run->o;
    size_t n = train_options_format(o, NULL, 0);
    size_t cap = n + strlen(SAVED_MAGIC) + 160;
    char *s = malloc(cap);
    if (!s) return NULL;
    int k = snprintf(s, cap, "%s\n", SAVED_MAGIC);
    train_options_format(o, s + k, cap - (size_t)k);
    size_t at = strlen(s);
    /* text_documents 1: --text's documents each after an EOT (gptx 0.6); a
     * record without it is of the layout before (one file as it is) */
    snprintf(s + at, cap - at, "data_hash %016llx\nworld_size %d\nbest_val_loss %.9g\nrun_id %s\n%s",
             (unsigned long long)run->data_hash, run->world, run->best_val, run->run_id,
             run->text_docs ? "text_documents 1\n" : "");
    return s;
}

/* --resume: the same data and the same number of ranks, or not the same
 * run; the best validation loss so far continues from the record. */
int run_check_saved(train_run *run) {
    const char *resume = run->o.resume;
    char want[64] = "", got[32];
    snprintf(got, sizeof got, "%016llx", (unsigned long long)run->data_hash);
    if (train_saved_get(run->saved, "data_hash", want, sizeof want) == 0 && strcmp(want, got)) {
        fprintf(stderr, "gptx-train: --resume %s: the data (%s) is not what the run trained "
                        "on (hash %s, the run's %s): the files or the tokenizer changed, or "
                        "they are other files; resume with the run's data, or start a new "
                        "run from this model with --init-from %s\n",
                resume, run->data_name, got, want, resume);
        return -1;
    }
    char ws[32] = "";
    if (train_saved_get(run->saved, "world_size", ws, sizeof ws) == 0 && atoi(ws) != run->world) {
        fprintf(stderr, "gptx-train: --resume %s: the run had %s process(es), this one %d: "
                        "the global batch and each rank's share of the data would change; "
                        "resume with %s\n", resume, ws, run->world, ws);
        return -1;
    }
    char bv[64] = "";
    if (train_saved_get(run->saved, "best_val_loss", bv, sizeof bv) == 0)
        run->best_val = strtod(bv, NULL);
    /* the same run goes on under its id; one saved before ids gets a new
     * one for what it writes now, and cannot be told from other runs */
    char id[64] = "";
    if (train_saved_get(run->saved, "run_id", id, sizeof id) == 0 && strlen(id) == 16)
        memcpy(run->run_id, id, 17);
    else
        run->run_id_unknown = 1;
    return 0;
}
