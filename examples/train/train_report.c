#include "train_report.h"

#include "prog_files.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

/* The terminal's width: $COLUMNS if set (what a user or a test asks for),
 * else the window size of stdout, else 80. */
static int terminal_columns(void) {
    const char *env = getenv("COLUMNS");
    if (env && atoi(env) > 0) return atoi(env);
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    return 80;
}

/* Reads the numbers of one metrics row; 0 if it is a train or val row. */
static int parse_row(const char *line, int *is_val, train_point *p) {
    const char *type = strstr(line, "\"type\": \"");
    const char *step = strstr(line, "\"step\": "), *tok = strstr(line, "\"tokens_seen\": ");
    if (!type || !step || !tok) return -1;
    type += strlen("\"type\": \"");
    *is_val = !strncmp(type, "val\"", 4);
    if (!*is_val && strncmp(type, "train\"", 6)) return -1;
    const char *loss = strstr(line, *is_val ? "\"val_loss\": " : "\"train_loss\": ");
    if (!loss) return -1;
    p->step = strtoll(step + 8, NULL, 10);
    p->tokens_seen = strtoll(tok + 15, NULL, 10);
    p->loss = strtod(strchr(loss, ':') + 1, NULL);
    return 0;
}

static void push(train_point **a, size_t *n, size_t *cap, train_point p);

/* Whether a line is a warning row about a step after `step`. */
static int warning_after(const char *line, int64_t step) {
    const char *at = strstr(line, "\"step\": ");
    return strstr(line, "{\"type\": \"warning\"") == line && at &&
           strtoll(at + 8, NULL, 10) > step;
}

/* A resumed run in the same folder: the rows of the run up to the step it
 * resumes at stay (and feed the plot), later ones (written after that
 * checkpoint by the run that then stopped) go, so no step appears twice;
 * the file is replaced atomically. 0, or -1 after a message. */
static int keep_history(train_report *r, const char *path, int64_t resume_step) {
    /* a FIFO or device here was refused by outdir_claim before; a link is
     * not the run's record: it is replaced by the run's own file */
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) return outdir_unlink_link(path);
    FILE *in = prog_open_read("gptx-train", "the metrics record", path);
    if (!in) return -1;
    prog_out out;
    if (prog_out_open(&out, "gptx-train", path) != 0) {
        fclose(in);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, in)) > 0) {
        if (line[len - 1] != '\n') break; /* a row cut short by a crash */
        int is_val = 0;
        train_point p;
        int row = parse_row(line, &is_val, &p) == 0;
        if (row && (is_val ? p.step >= resume_step : p.step > resume_step)) continue;
        if (!row && warning_after(line, resume_step)) continue; /* the run will say it again */
        if (!row && strstr(line, "{\"type\": \"warning\"") == line) r->warned_climb = 1;
        if (row) {
            if (is_val) push(&r->val, &r->n_val, &r->cap_val, p);
            else push(&r->train, &r->n_train, &r->cap_train, p);
        }
        fputs(line, out.f);
    }
    free(line);
    int bad_in = ferror(in);
    fclose(in);
    if (bad_in) {
        fprintf(stderr, "gptx-train: cannot read %s for the resumed run\n", path);
        fclose(out.f);
        free(out.buf);
        return -1;
    }
    /* the library's atomic writer: a link to the record stays a link */
    return prog_out_save(&out, "gptx-train", "the metrics of the resumed run to", path);
}

int train_report_open(train_report *r, const char *out_dir, int log_every, int rank,
                      int world_size, int64_t resume_step, const train_report_claim *claim) {
    memset(r, 0, sizeof *r);
    r->dir.fd = -1;
    r->world_size = world_size;
    if (rank > 0) {
        r->silent = 1; /* rank 0 reports for everyone */
        return 0;
    }
    /* mpirun hands ranks a pseudo-terminal even when its own output goes to
     * a file: data-parallel runs always print plain lines */
    r->tty = world_size == 1 && isatty(STDOUT_FILENO);
    r->log_every = log_every;
    if (mkdir(out_dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "gptx-train: cannot create %s: %s\n", out_dir, strerror(errno));
        return -1;
    }
    /* one run per folder: two would interleave their metrics and replace
     * each other's checkpoint; and no run takes over another's files unasked */
    int fresh = 0;
    if (outdir_lock(&r->dir, out_dir) != 0 ||
        outdir_claim(&r->dir, claim->run_id, claim->resume, claim->overwrite, claim->inputs,
                     &fresh) != 0)
        return -1;
    if (fresh) resume_step = -1; /* --overwrite on resume: the records start anew */
    snprintf(r->metrics_path, sizeof r->metrics_path, "%s/metrics.jsonl", out_dir);
    if (resume_step >= 0 && keep_history(r, r->metrics_path, resume_step) != 0) return -1;
    /* appended row by row to the run's own file; a FIFO, device or folder
     * there is refused, a link replaced */
    if (outdir_unlink_link(r->metrics_path) != 0) return -1;
    r->metrics = prog_open_rows("gptx-train", "the metrics record", r->metrics_path,
                                resume_step < 0);
    return r->metrics ? 0 : -1;
}

/* Every row is flushed as it is written, so a crash loses at most the row
 * being written; the first failure (a full disk) is kept for train_report_ok. */
static void row_done(train_report *r) {
    if (r->write_errno) return;
    if (ferror(r->metrics) || fflush(r->metrics) != 0) r->write_errno = errno ? errno : EIO;
}

int train_report_ok(train_report *r) {
    if (r->silent || !r->write_errno) return 0;
    if (!r->write_reported) {
        if (r->line_open) putchar('\n');
        r->line_open = 0;
        fprintf(stderr, "gptx-train: cannot write %s: %s\n", r->metrics_path,
                strerror(r->write_errno));
        r->write_reported = 1;
    }
    return -1;
}

int train_report_held(train_report *r) {
    return r->silent ? 0 : outdir_held(&r->dir);
}

/* Whether a metrics row may be written: the run still holds the folder. */
static int may_write(train_report *r) {
    return !r->silent && outdir_held(&r->dir) == 0;
}

int train_report_close(train_report *r) {
    if (r->line_open) putchar('\n');
    r->line_open = 0;
    if (r->metrics && fclose(r->metrics) != 0 && !r->write_errno) r->write_errno = errno;
    r->metrics = NULL;
    int rc = train_report_ok(r);
    outdir_release(&r->dir);
    free(r->train);
    free(r->val);
    memset(r, 0, sizeof *r);
    r->dir.fd = -1;
    return rc;
}

static void push(train_point **a, size_t *n, size_t *cap, train_point p) {
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        train_point *na = realloc(*a, nc * sizeof *na);
        if (!na) return; /* the curve loses points, the run goes on */
        *a = na;
        *cap = nc;
    }
    (*a)[(*n)++] = p;
}

static void format_duration(char *buf, size_t n, double s) {
    if (!(s >= 0) || s > 360000) {
        snprintf(buf, n, "--");
    } else if (s >= 3600) {
        snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
    } else {
        snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    }
}

void train_report_step(train_report *r, int64_t step, int64_t total, float loss, float lr,
                       float grad_norm, int64_t tokens_seen, double step_seconds,
                       double steady_tps, double eta, uint64_t mem_peak) {
    if (!may_write(r)) return;
    push(&r->train, &r->n_train, &r->cap_train, (train_point){step, tokens_seen, loss});
    fprintf(r->metrics,
            "{\"type\": \"train\", \"step\": %lld, \"train_loss\": %.6f, \"lr\": %.6g, "
            "\"grad_norm\": %.6g, \"tokens_seen\": %lld, \"step_seconds\": %.6f, "
            "\"tokens_per_second\": %.1f, \"memory_peak_bytes\": %llu}\n",
            (long long)step, (double)loss, (double)lr, (double)grad_norm, (long long)tokens_seen,
            step_seconds, steady_tps, (unsigned long long)mem_peak);
    row_done(r);
    char eta_s[32];
    format_duration(eta_s, sizeof eta_s, eta);
    /* data parallel: loss, grad norm and throughput are over all ranks */
    const char *g = r->world_size > 1 ? " (global)" : "";
    const char *gt = r->world_size > 1 ? "global, " : "";
    if (r->tty) {
        /* the longest form that fits the terminal: a line that wraps is
         * redrawn as a new line every step */
        char forms[4][160];
        snprintf(forms[0], sizeof forms[0],
                 "step %lld/%lld | loss%s %.4f | lr %.2e | %.0f tok/s (%savg of training steps) | "
                 "ETA %s",
                 (long long)step, (long long)total, g, (double)loss, (double)lr, steady_tps, gt,
                 eta_s);
        snprintf(forms[1], sizeof forms[1],
                 "step %lld/%lld | loss%s %.4f | lr %.2e | %.0f tok/s avg | ETA %s", (long long)step, (long long)total, g, (double)loss, (double)lr, steady_tps, eta_s);
        snprintf(forms[2], sizeof forms[2], "%lld/%lld | loss %.4f | %.0f tok/s | ETA %s",
                 (long long)step, (long long)total, (double)loss, steady_tps, eta_s);
        snprintf(forms[3], sizeof forms[3], "%lld/%lld %.3f %s", (long long)step, (long long)total,
                 (double)loss, eta_s);
        int cols = terminal_columns(), pick = 3;
        for (int f = 0; f < 3; f++)
            if ((int)strlen(forms[f]) < cols) {
                pick = f;
                break;
            }
        printf("\r\033[K%.*s", cols > 1 ? cols - 1 : 1, forms[pick]);
        fflush(stdout);
        r->line_open = 1;
    } else if (step % r->log_every == 0 || step == total || step == 1) {
        printf("step %lld/%lld | loss%s %.4f | lr %.2e | grad norm%s %.3f | %.0f tok/s (%savg of "
               "training steps) | ETA %s\n",
               (long long)step, (long long)total, g, (double)loss, (double)lr, g,
               (double)grad_norm, steady_tps, gt, eta_s);
        fflush(stdout);
    }
}

void train_report_line(train_report *r, const char *fmt, ...) {
    if (r->silent) return;
    if (r->line_open) {
        putchar('\n');
        r->line_open = 0;
    }
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

/* s as a JSON string (quotes, backslashes and control bytes escaped) */
static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

void train_report_config(train_report *r, const train_config_record *c) {
    if (!may_write(r)) return;
    FILE *f = r->metrics;
    fprintf(f, "{\"type\": \"config\", \"run_id\": ");
    json_string(f, c->run_id); /* first: what --out-dir's check reads (train_outdir.c) */
    fprintf(f, ", \"gptx_version\": ");
    json_string(f, c->version);
    fprintf(f, ", \"backend\": ");
    json_string(f, c->backend);
    fprintf(f, ", \"threads\": %d, \"precision\": ", c->threads);
    json_string(f, c->precision);
    fprintf(f, ", \"data\": ");
    json_string(f, c->data);
    fprintf(f, ", \"train_tokens\": %lld, \"init_from\": ", (long long)c->train_tokens);
    if (c->init_from) json_string(f, c->init_from);
    else fprintf(f, "null");
    fprintf(f, ", \"resume\": ");
    if (c->resume) json_string(f, c->resume);
    else fprintf(f, "null");
    fprintf(f,
            ", \"n_layer\": %d, \"n_head\": %d, \"n_embd\": %d, \"context\": %d, "
            "\"vocab\": %d, \"padded_vocab\": %d, \"parameters\": %zu, \"batch\": %d, "
            "\"grad_accum\": %d, \"world_size\": %d, \"tokens_per_step\": %lld, \"steps\": %lld, "
            "\"lr\": %.6g, \"schedule\": ",
            c->n_layer, c->n_head, c->n_embd, c->context, c->vocab, c->padded_vocab, c->parameters,
            c->batch, c->grad_accum, c->world_size, (long long)c->tokens_per_step,
            (long long)c->steps, c->lr);
    json_string(f, c->schedule);
    fprintf(f,
            ", \"warmup\": %d, \"min_lr_frac\": %.6g, \"weight_decay\": %.6g, "
            "\"grad_clip\": %.6g, \"beta1\": %.6g, \"beta2\": %.6g, \"seed\": %llu, "
            "\"data_hash\": \"%016llx\", \"unigram_val_loss\": ",
            c->warmup, c->min_lr_frac, c->weight_decay, c->grad_clip, c->beta1, c->beta2,
            (unsigned long long)c->seed, c->data_hash);
    if (isfinite(c->unigram_val_loss)) fprintf(f, "%.6g", c->unigram_val_loss);
    else fprintf(f, "null");
    fprintf(f, ", \"flags\": ");
    json_string(f, c->flags ? c->flags : "");
    fprintf(f, "}\n");
    row_done(r);
}

void train_report_val(train_report *r, int64_t step, int64_t tokens_seen, double val_loss,
                      int64_t val_tokens) {
    if (!may_write(r)) return;
    push(&r->val, &r->n_val, &r->cap_val, (train_point){step, tokens_seen, val_loss});
    fprintf(r->metrics,
            "{\"type\": \"val\", \"step\": %lld, \"val_loss\": %.6f, \"val_tokens\": %lld, "
            "\"tokens_seen\": %lld}\n",
            (long long)step, val_loss, (long long)val_tokens, (long long)tokens_seen);
    row_done(r);
    if (r->world_size > 1)
        train_report_line(r, "step %lld | val loss (global) %.4f (%lld tokens, all ranks) | tokens "
                          "seen (global) %lld\n",
                          (long long)step, val_loss, (long long)val_tokens, (long long)tokens_seen);
    else
        train_report_line(r, "step %lld | val loss %.4f (%lld tokens) | tokens seen %lld\n",
                          (long long)step, val_loss, (long long)val_tokens, (long long)tokens_seen);
}

void train_report_warning(train_report *r, int64_t step, double loss, const char *text) {
    if (!may_write(r)) return;
    fprintf(r->metrics, "{\"type\": \"warning\", \"step\": %lld, \"train_loss\": ",
            (long long)step);
    if (isfinite(loss)) fprintf(r->metrics, "%.6f", loss);
    else fprintf(r->metrics, "null"); /* JSON has no nan */
    fprintf(r->metrics, ", \"message\": ");
    json_string(r->metrics, text);
    fprintf(r->metrics, "}\n");
    row_done(r);
    train_report_line(r, "step %lld | warning: %s\n", (long long)step, text);
}

double train_report_first_loss(const train_report *r) {
    return r->n_train > 0 ? r->train[0].loss : NAN;
}

/* ---- SVG ---------------------------------------------------------------- */

typedef struct {
    double x0, x1, y0, y1; /* data ranges */
    double left, top, width, height;
} plot_frame;

static double px(const plot_frame *f, double x) {
    return f->left + (x - f->x0) / (f->x1 - f->x0) * f->width;
}
static double py(const plot_frame *f, double y) {
    return f->top + f->height - (y - f->y0) / (f->y1 - f->y0) * f->height;
}

static void polyline(FILE *out, const plot_frame *f, const train_point *p, size_t n,
                     const char *color, int dots) {
    if (n == 0) return;
    fprintf(out, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", color);
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%.1f,%.1f ", px(f, (double)p[i].step), py(f, p[i].loss));
    fprintf(out, "\"/>\n");
    if (dots)
        for (size_t i = 0; i < n; i++)
            fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                    px(f, (double)p[i].step), py(f, p[i].loss), color);
}

/* The round step (1, 2 or 5 x 10^k) that cuts range into at most ~max_ticks parts. */
static double nice_step(double range, int max_ticks) {
    if (!(range > 0)) return 1;
    double raw = range / max_ticks, mag = pow(10, floor(log10(raw))), norm = raw / mag;
    return (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * mag;
}

/* 950, 30k, 1.2M, 3G */
static void format_count(char *buf, size_t n, double v) {
    if (v >= 1e9) snprintf(buf, n, "%gG", v / 1e9);
    else if (v >= 1e6) snprintf(buf, n, "%gM", v / 1e6);
    else if (v >= 1e3) snprintf(buf, n, "%gk", v / 1e3);
    else snprintf(buf, n, "%g", v);
}

int train_report_write_svg(const train_report *r, const char *path) {
    if (r->silent) return 0;
    /* composed in memory, then saved atomically: the last plot survives a crash */
    prog_out po;
    if (prog_out_open(&po, "gptx-train", path) != 0) return -1;
    FILE *out = po.f;
    plot_frame f = {0, 1, INFINITY, -INFINITY, 70, 50, 560, 300};
    const train_point *sets[2] = {r->train, r->val};
    size_t ns[2] = {r->n_train, r->n_val};
    int64_t max_tokens = 0;
    for (int s = 0; s < 2; s++)
        for (size_t i = 0; i < ns[s]; i++) {
            if (sets[s][i].step > f.x1) f.x1 = (double)sets[s][i].step;
            if (sets[s][i].tokens_seen > max_tokens) max_tokens = sets[s][i].tokens_seen;
            if (isfinite(sets[s][i].loss)) {
                f.y0 = fmin(f.y0, sets[s][i].loss);
                f.y1 = fmax(f.y1, sets[s][i].loss);
            }
        }
    if (!(f.y1 > f.y0)) { f.y0 = 0; f.y1 = 1; }
    double pad = (f.y1 - f.y0) * 0.05;
    f.y0 -= pad;
    f.y1 += pad;
    fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"680\" height=\"410\" "
                 "font-family=\"sans-serif\" font-size=\"11\">\n"
                 "<rect width=\"680\" height=\"410\" fill=\"white\"/>\n");
    fprintf(out, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" "
                 "stroke=\"#888\"/>\n", f.left, f.top, f.width, f.height);
    /* ticks on round values: 1, 2 or 5 x 10^k apart */
    double xs = nice_step(f.x1 - f.x0, 6), ys = nice_step(f.y1 - f.y0, 6);
    for (double x = ceil(f.x0 / xs) * xs; x <= f.x1 + 1e-9 * xs; x += xs)
        fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n", px(&f, x),
                f.top + f.height + 15, x);
    int ydec = ys >= 1 ? 0 : (int)ceil(-log10(ys) - 1e-9);
    for (double y = ceil(f.y0 / ys) * ys; y <= f.y1 + 1e-9 * ys; y += ys) {
        fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.*f</text>\n", f.left - 5,
                py(&f, y) + 4, ydec, y);
        fprintf(out, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n",
                f.left, f.left + f.width, py(&f, y), py(&f, y));
    }
    /* tokens seen on top, at the steps where they are reached (tokens per step is constant) */
    if (max_tokens > 0 && f.x1 > 0) {
        double per_step = (double)max_tokens / f.x1, ts = nice_step((double)max_tokens, 6);
        for (double t = 0; t <= (double)max_tokens * (1 + 1e-9); t += ts) {
            char label[32];
            format_count(label, sizeof label, t);
            fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\">%s</text>\n",
                    px(&f, t / per_step), f.top - 6, label);
        }
    }
    fprintf(out, "<text x=\"350\" y=\"395\" text-anchor=\"middle\">optimizer step</text>\n"
                 "<text x=\"350\" y=\"25\" text-anchor=\"middle\" fill=\"#555\">tokens seen</text>\n"
                 "<text x=\"18\" y=\"200\" transform=\"rotate(-90 18 200)\" "
                 "text-anchor=\"middle\">cross-entropy loss</text>\n");
    polyline(out, &f, r->train, r->n_train, "#1f77b4", 0);
    polyline(out, &f, r->val, r->n_val, "#d62728", 1);
    fprintf(out, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#1f77b4\">train loss</text>\n"
                 "<text x=\"%.0f\" y=\"%.0f\" fill=\"#d62728\">val loss</text>\n</svg>\n",
            f.left + f.width - 90, f.top + 15, f.left + f.width - 90, f.top + 30);
    return prog_out_save(&po, "gptx-train", "the loss plot", path);
}
