/* gptx-train's run configuration: the flags, the launcher, the record each
 * checkpoint stores, and what a resumed run checks against that record. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "prog_flags.h"
#include "prog_threads.h"
#include "train_outdir.h"
#include "train_run.h"

/* The first line of the run configuration gptx-train stores in its
 * checkpoints (user metadata): its format, in case it ever changes. */
#define SAVED_MAGIC "gptx-train run configuration 1"

/* The record (user metadata) of checkpoint path into *saved (malloc'ed);
 * a library status (the message set), GPTX_ERR_NO_MEMORY without one. */
static int read_record(const char *path, char **saved, size_t *n) {
    *saved = NULL;
    int rc = gptx_checkpoint_user_metadata(path, NULL, 0, n);
    if (rc == GPTX_ERR_SHAPE) {
        *saved = malloc(*n + 1);
        rc = *saved ? gptx_checkpoint_user_metadata(path, *saved, *n + 1, n) : GPTX_ERR_NO_MEMORY;
    }
    if (rc != GPTX_OK) {
        free(*saved);
        *saved = NULL;
    }
    return rc;
}

/* --resume DIR: the checkpoint o.resume names could not be used (status
 * rc, its message set): moves to the next one of the folder, saying so on
 * stderr, naming both. 0 when there is one, -1 (nothing printed) when rc
 * is not a damaged or missing file or none is left. */
int run_resume_fallback(train_run *run, int rc) {
    if (rc == GPTX_ERR_NO_MEMORY || run->resume_at + 1 >= run->resume_list.n) return -1;
    const char *bad = run->resume_list.paths[run->resume_at];
    const char *next = run->resume_list.paths[run->resume_at + 1];
    fprintf(stderr, "gptx-train: --resume %s: %s%s cannot be used (%s: %s); resuming from the "
                    "previous checkpoint, %s\n", run->resume_arg, bad,
            run->resume_at == 0 && run->resume_list.from_latest ? ", the one `latest` names," : "",
            gptx_status_name(rc), prog_error_text(), next);
    gptx_clear_error();
    run->resume_at++;
    run->o.resume = next;
    return 0;
}

/* --resume: a folder becomes its best checkpoint (train_ckpts.h), a file
 * stays itself. 0, or -1 after a message (status 1: a missing input). */
static int resolve_resume(train_run *run) {
    const char *arg = run->resume_arg = run->o.resume;
    struct stat st;
    if (stat(arg, &st) != 0) {
        fprintf(stderr, "gptx-train: --resume %s: %s\n", arg, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) return 0;
    ckpt_candidates *c = &run->resume_list;
    if (ckpt_candidates_list(arg, c) != 0) return -1;
    const char *sep = arg[0] && arg[strlen(arg) - 1] == '/' ? "" : "/";
    if (c->n == 0) {
        fprintf(stderr, "gptx-train: --resume %s: the folder holds no checkpoint (no `latest`, "
                        "checkpoint-N.safetensors or checkpoint.safetensors)%s%s%s%s%s\n", arg,
                c->latest_why[0] ? "; its " : "", c->latest_why[0] ? arg : "",
                c->latest_why[0] ? sep : "", c->latest_why[0] ? "latest cannot be used: " : "",
                c->latest_why);
        return -1;
    }
    if (c->latest_why[0]) /* the promise: a checkpoint not used is named, with the one used */
        fprintf(stderr, "gptx-train: --resume %s: %s%slatest cannot be used (%s); resuming from "
                        "the newest checkpoint of the folder, %s\n", arg, arg, sep,
                c->latest_why, c->paths[0]);
    run->o.resume = c->paths[0];
    return 0;
}

/* --resume without --out-dir: the run continues in the folder it resumes
 * from, wherever that is now (the folder given, or the one that holds the
 * checkpoint file given), never in the --out-dir its record names: that
 * path was relative to another working folder, or names the folder this one
 * was copied or moved from, whose files are another copy's (issue 34,
 * item 1). 0, or -1 when out of memory. */
static int resume_out_dir(train_run *run) {
    if (train_options_given(&run->o, "--out-dir")) return 0; /* the user's choice */
    const char *arg = run->resume_arg;
    const char *slash = strrchr(arg, '/');
    if (run->resume_list.paths) /* a folder: itself */
        run->resume_folder = strdup(arg);
    else if (!slash) /* a file in the working folder */
        run->resume_folder = strdup(".");
    else /* "/ckpt" is in "/" */
        run->resume_folder = strndup(arg, slash == arg ? 1 : (size_t)(slash - arg));
    if (!run->resume_folder) {
        fprintf(stderr, "gptx-train: out of memory\n");
        return -1;
    }
    run->o.out_dir = run->resume_folder;
    return 0;
}

/* --resume: each file the run recorded and the command line does not
 * replace is still there (a moved corpus, a removed copy): else the message
 * says which flag gives its new place, once, before anything is opened.
 * Globs and folders are left to the inputs' own messages. 0, or -1. */
static int recorded_paths_exist(const train_options *o, const train_options *cli,
                                const char *arg) {
    const struct { const char *flag, *path; } data[] = {
        {"--encoder", o->encoder}, {"--vocab", o->vocab}, {"--text", o->text},
        {"--train-shards", o->train_shards}, {"--val-shards", o->val_shards}};
    for (size_t i = 0; i < sizeof data / sizeof data[0]; i++) {
        const char *list = data[i].path;
        if (!list || !strcmp(list, "-") || train_options_given(cli, data[i].flag)) continue;
        for (const char *p = list; *p;) {
            size_t n = strcspn(p, ",");
            char *one = strndup(p, n);
            struct stat st;
            int gone = one && !strpbrk(one, "*?[") && stat(one, &st) != 0;
            if (gone)
                fprintf(stderr, "gptx-train: --resume %s: the run's %s %s is gone (%s); give "
                                "%s with where it is now (the data must hash the same as the "
                                "run's)\n", arg, data[i].flag, one, strerror(errno),
                        data[i].flag);
            free(one);
            if (gone) return -1;
            p += n + (p[n] == ',');
        }
    }
    return 0;
}

/* --resume: o becomes the configuration saved in the checkpoint, with the
 * flags of the command line a resumed run may change. run->saved gets the
 * whole record (for data_hash, world_size, best_val_loss), run->saved_flags
 * the copy o's strings point into; both stay allocated until the end. With
 * --resume DIR, a checkpoint whose record cannot be read gives way to the
 * previous one. 0, or -1 after a message (run->status 1 for a file that
 * cannot be used, 2 for flags that do not fit the run). */
static int resume_config(train_run *run) {
    train_options *o = &run->o;
    if (o->init_from) {
        fprintf(stderr, "gptx-train: --resume and --init-from exclude each other (--resume "
                        "continues a run, --init-from starts a new one from a model)\n");
        return -1;
    }
    run->status = 1; /* from here to the flags' check: the file */
    if (resolve_resume(run) != 0) return -1;
    size_t n = 0;
    int rc;
    while ((rc = read_record(o->resume, &run->saved, &n)) != GPTX_OK &&
           run_resume_fallback(run, rc) == 0) {
    }
    if (rc == GPTX_ERR_NOT_FOUND) {
        fprintf(stderr, "gptx-train: --resume %s: %s; --resume takes a checkpoint of a "
                        "gptx-train 0.3 (or later) run, which holds its configuration, or the "
                        "run's --out-dir (--init-from starts a new run from any model's "
                        "weights)\n", o->resume, prog_error_text());
        return -1;
    }
    if (rc != GPTX_OK) {
        fprintf(stderr, "gptx-train: --resume %s: %s (%s)\n", o->resume,
                rc == GPTX_ERR_NO_MEMORY ? "out of memory" : prog_error_text(),
                gptx_status_name(rc));
        return -1;
    }
    if (strncmp(run->saved, SAVED_MAGIC "\n", strlen(SAVED_MAGIC) + 1) != 0) {
        fprintf(stderr, "gptx-train: --resume %s: its metadata is not a gptx-train run "
                        "configuration (no \"" SAVED_MAGIC "\" line)\n", o->resume);
        return -1;
    }
    if (!(run->saved_flags = strdup(run->saved))) {
        fprintf(stderr, "gptx-train: out of memory\n");
        return -1;
    }
    run->status = 2; /* the flags against the run's */
    const train_options cli = *o;
    if (train_options_resume(o, &cli, run->saved_flags, cli.resume) != 0) return -1;
    run->status = 1;
    if (recorded_paths_exist(o, &cli, run->resume_arg) != 0) return -1;
    return resume_out_dir(run);
}

/* --resume DIR fell back at load (a damaged tensor): the record of the
 * checkpoint now tried replaces run->saved (its best validation loss), and
 * it must be the same run's. 0, or -1 after a message. */
int run_resume_reread(train_run *run) {
    char *saved = NULL, a[64] = "", b[64] = "";
    size_t n;
    int rc = read_record(run->o.resume, &saved, &n);
    if (rc != GPTX_OK) return run_fail(run, rc);
    train_saved_get(run->saved, "run_id", a, sizeof a);
    train_saved_get(saved, "run_id", b, sizeof b);
    if (strcmp(a, b) != 0) {
        fprintf(stderr, "gptx-train: --resume %s: %s is another run's (run id %s, not %s)\n",
                run->resume_arg, run->o.resume, b[0] ? b : "none", a[0] ? a : "none");
        free(saved);
        return -1;
    }
    free(run->saved);
    run->saved = saved;
    return 0;
}

/* The options (--help and --version end the run with status 0, a bad flag
 * with 2, a --resume file that cannot be used with 1), --resume's saved
 * configuration, and what the launcher (if any) decides: rank, device and
 * the default thread count. */
int run_parse(train_run *run, int argc, char **argv) {
    run->status = 2;
    int prc = train_options_parse(&run->o, argc, argv);
    if (prc) {
        if (prc > 0) run->status = 0;
        return -1;
    }
    if (run->o.resume && resume_config(run) != 0) return -1;
    if (prog_threads_check("gptx-train", run->o.threads) != 0) return -1;
    if (run->o.save_best && run->o.train_shards && !run->o.val_shards) {
        /* it would write nothing, silently: no validation, no best */
        prog_usage_error("gptx-train", "--save-best", "1", "needs a validation loss: with "
                         "--train-shards, give --val-shards");
        return -1;
    }
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
    /* --rank-invariant: the global batch does not depend on the rank count */
    if (!run->o.rank_invariant && train_saved_get(run->saved, "world_size", ws, sizeof ws) == 0 &&
        atoi(ws) != run->world) {
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
