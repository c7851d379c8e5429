#include "ladder_report.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "gptx/gptx.h"
#include "ladder_rows.h"

#define TIMING_SCOPE                                                                       \
    "training steps only: zero_grad + forward + backward + AdamW; data already in host " \
    "memory (gptx_timer, GPTX_TIMER_TRAINING_STEPS)"
#define NOTE_MULTIPLY                                                                    \
    "Speed-ups do not multiply: a cumulative row's gain is measured on top of every "    \
    "change above it (a change can matter more or less once the others are in), and "     \
    "the product of the isolated gains is not the gain of all changes together."

int64_t ladder_report_budget(const ladder_report *r) {
    return ladder_total_steps(r->p) * (int64_t)r->p->shape.batch * r->p->shape.seq;
}

static int is_cumulative(const ladder_report *r) { return strcmp(r->p->mode, "cumulative") == 0; }

static const char *status_of(const ladder_report *r, int i) {
    const ladder_row *row = &r->rows[i];
    const ladder_result *res = &r->res[i];
    if (!row->available) return row->na_reason;
    if (!res->ran) return "FAIL (error)";
    if (!res->pass) return "FAIL";
    return row->is_baseline ? "PASS (reference)" : "PASS";
}

/* the row whose tokens/s a row's speed-up is relative to, or -1 */
static int previous_row(const ladder_report *r, int i) {
    if (!is_cumulative(r) || i == 0 || !r->rows[i - 1].available) return -1;
    return i - 1;
}

static double speedup(const ladder_report *r, int i, int j) {
    if (j < 0 || !r->res[i].ran || !r->res[j].ran) return NAN;
    return r->res[i].tps_median / r->res[j].tps_median;
}

static double updates_per_budget(const ladder_report *r, int i) {
    return (double)ladder_report_budget(r) / (double)r->res[i].tokens_per_step;
}

/* printf of one number, an em dash for NaN, "0" for an exact zero */
static const char *num(char *buf, size_t n, const char *fmt, double v) {
    if (isnan(v)) snprintf(buf, n, "—");
    else if (v == 0.0) snprintf(buf, n, "0");
    else snprintf(buf, n, fmt, v);
    return buf;
}

/* a tolerance: "exact" for 0 (bitwise equality demanded) */
static const char *tol_text(char *buf, size_t n, double tol) {
    if (tol == 0.0) snprintf(buf, n, "exact");
    else snprintf(buf, n, "%.0e", tol);
    return buf;
}

static void header(const ladder_report *r, FILE *out) {
    const ladder_params *p = r->p;
    const ladder_shape *s = &p->shape;
    int threads = r->res[0].threads ? r->res[0].threads : p->threads;
    fprintf(out, "## gptx-bench: ablation ladder — config `%s`, mode `%s`\n\n", s->name, p->mode);
    fprintf(out, "- gptx %s, backend cpu (fp32), %d threads; CPU: %s, %d online; load average "
                 "(1/5/15 min) at start %s, at end %s\n",
            gptx_version(), threads, r->cpu, r->online_cpus, r->load_start, r->load_end);
    fprintf(out, "- model: vocab %d (padded-vocab rows: %d, masked), T %d, %d layers, %d heads, "
                 "width %d, batch B = %d (batch row: %d); tied head, qkv bias; init seed %llu "
                 "for every row (same parameters)\n",
            s->vocab, s->padded_vocab, s->seq, s->layers, s->heads, s->width, s->batch,
            2 * s->batch, (unsigned long long)p->seed);
    fprintf(out, "- data: %s, GPT-2 BPE, %zu tokens: the first %zu train (consecutive windows, "
                 "in order, the same for every row), the last %zu are the held-out batch (eval "
                 "loss, logits)\n",
            r->text_path, r->n_tokens, r->n_train, r->n_eval);
    fprintf(out, "- steps per row: N = %lld = 1 cold + %d warm-up + %d repeats x %d timed; AdamW "
                 "defaults (lr 3e-4, betas 0.9/0.95, weight decay 0.1, clip 1.0)\n",
            (long long)ladder_total_steps(p), p->warmup, p->repeats, p->steps);
    fprintf(out, "- timing scope: %s\n", TIMING_SCOPE);
    fprintf(out, "- tokens/s: median and min–max over the %d repeats of %d steps; cold start = "
                 "context + model + init + optimizer + first step (the first step alone in "
                 "parentheses)\n",
            p->repeats, p->steps);
    fprintf(out, "- peak memory: gptx_context_memory peak (library buffers: parameters, "
                 "gradients, AdamW moments, activations); per-call host scratch of the "
                 "step-by-step LN/GELU kernels is not included\n");
    fprintf(out, "- numerics vs the baseline row: Δ eval loss = |eval loss - baseline's| on the "
                 "held-out batch after N steps; max Δ logit = max |logit - baseline's| of the "
                 "freshly initialised model on the held-out batch (first %d columns); loss finite at every step. Tolerances in parentheses%s\n",
            s->vocab, p->tolerance_scale != 1.0 ? " (scaled by --tolerance-scale)" : "");
    fprintf(out, "- token budget: N x B x T = %lld tokens; \"updates/budget\" = optimizer "
                 "updates a row needs to train on it (a bigger batch makes fewer updates)\n\n",
            (long long)ladder_report_budget(r));
}

void ladder_report_markdown(const ladder_report *r, FILE *out) {
    header(r, out);
    int cumulative = is_cumulative(r);
    fprintf(out, "| # | row | B | tokens/step | updates/budget | tokens/s median | min–max | "
                 "x baseline |%s cold start s (first step) | peak MiB | eval loss | Δ eval loss "
                 "(tol) | max Δ logit (tol) | finite | status |\n",
            cumulative ? " x previous |" : "");
    fprintf(out, "|---:|---|---:|---:|---:|---:|---:|---:|%s---:|---:|---:|---:|---:|---|---|\n",
            cumulative ? "---:|" : "");
    char a[64], b[64], c[32], d[32];
    for (int i = 0; i < r->n; i++) {
        const ladder_row *row = &r->rows[i];
        const ladder_result *res = &r->res[i];
        if (!row->available) {
            fprintf(out, "| %d | %s | — | — | — | — | — | — |%s — | — | — | — | — | — | %s |\n",
                    i, row->label, cumulative ? " — |" : "", row->na_reason);
            continue;
        }
        fprintf(out, "| %d | %s | %d | %lld | %.3g | ", i, row->label, res->B,
                (long long)res->tokens_per_step, updates_per_budget(r, i));
        if (res->ran)
            fprintf(out, "%.0f | %.0f–%.0f | %.2f |", res->tps_median, res->tps_min, res->tps_max,
                    speedup(r, i, 0));
        else
            fprintf(out, "— | — | — |");
        if (cumulative) fprintf(out, " %s |", num(a, sizeof a, "%.2f", speedup(r, i, previous_row(r, i))));
        if (res->ran)
            fprintf(out, " %.2f (%.2f) | %.1f | %.4f | ", res->cold_start_s, res->first_step_s,
                    (double)res->peak_bytes / 1048576.0, res->eval_loss);
        else
            fprintf(out, " — | — | — | ");
        if (row->is_baseline)
            fprintf(out, "0 (reference) | 0 (reference) | ");
        else {
            if (row->loss_tol < 0)
                fprintf(out, "%s (not compared: 2x tokens/update) | ",
                        num(a, sizeof a, "%.2e", res->loss_diff));
            else
                fprintf(out, "%s (%s) | ", num(a, sizeof a, "%.2e", res->loss_diff),
                        tol_text(c, sizeof c, row->loss_tol));
            fprintf(out, "%s (%s) | ", num(b, sizeof b, "%.2e", res->logits_max_abs),
                    tol_text(d, sizeof d, row->logits_tol));
        }
        fprintf(out, "%s | %s |\n", res->finite ? "yes" : "**no**", status_of(r, i));
    }
    fprintf(out, "\n");
    for (int i = 0; i < r->n; i++) {
        if (!r->rows[i].available) continue;
        char desc[256];
        ladder_variant_describe(&r->rows[i].v, &r->p->shape, desc, sizeof desc);
        fprintf(out, "- row %d (%s): %s%s%s\n", i, r->rows[i].change, desc,
                r->res[i].error[0] ? " — error: " : "", r->res[i].error);
    }
    fprintf(out, "\n%s\n", NOTE_MULTIPLY);
    fprintf(out, "A bigger batch raises tokens/s but halves the optimizer updates per token "
                 "budget: compare it at equal updates or equal loss, not at equal tokens/s.\n");
    fprintf(out, "Rows marked n/a need the CUDA backend, which this build does not have; they "
                 "are listed so that their absence is visible, not measured.\n");
}

/* ---- CSV ------------------------------------------------------------------ */

static void csv_text(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void csv_num(FILE *f, const char *fmt, double v) {
    if (!isnan(v)) fprintf(f, fmt, v);
    fputc(',', f);
}

static FILE *open_out(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) fprintf(stderr, "gptx-bench: cannot write %s: %s\n", path, strerror(errno));
    return f;
}

static int close_out(FILE *f, const char *path) {
    int bad = ferror(f);
    if (fclose(f) != 0) bad = 1;
    if (bad) fprintf(stderr, "gptx-bench: error writing %s\n", path);
    return bad ? -1 : 0;
}

int ladder_report_csv(const ladder_report *r, const char *path) {
    FILE *f = open_out(path);
    if (!f) return -1;
    fprintf(f, "config,mode,index,key,row,change,status,threads,batch,tokens_per_step,"
               "updates_per_budget,tokens_per_s_median,tokens_per_s_min,tokens_per_s_max,"
               "speedup_vs_baseline,speedup_vs_previous,cold_start_s,first_step_s,create_s,"
               "peak_bytes,eval_loss,loss_abs_diff,loss_tol,logits_max_abs_diff,"
               "logits_max_rel_diff,logits_tol,finite,error\n");
    for (int i = 0; i < r->n; i++) {
        const ladder_row *row = &r->rows[i];
        const ladder_result *res = &r->res[i];
        fprintf(f, "%s,%s,%d,%s,", r->p->shape.name, r->p->mode, i, row->key);
        csv_text(f, row->label);
        fputc(',', f);
        csv_text(f, row->change);
        fputc(',', f);
        csv_text(f, status_of(r, i));
        fputc(',', f);
        if (!row->available) {
            fprintf(f, ",,,,,,,,,,,,,,,,,,,,\n");
            continue;
        }
        fprintf(f, "%d,%d,%lld,", res->threads, res->B, (long long)res->tokens_per_step);
        csv_num(f, "%.6g", updates_per_budget(r, i));
        int ran = res->ran;
        csv_num(f, "%.3f", ran ? res->tps_median : NAN);
        csv_num(f, "%.3f", ran ? res->tps_min : NAN);
        csv_num(f, "%.3f", ran ? res->tps_max : NAN);
        csv_num(f, "%.4f", speedup(r, i, 0));
        csv_num(f, "%.4f", speedup(r, i, previous_row(r, i)));
        csv_num(f, "%.6f", ran ? res->cold_start_s : NAN);
        csv_num(f, "%.6f", ran ? res->first_step_s : NAN);
        csv_num(f, "%.6f", ran ? res->create_s : NAN);
        fprintf(f, "%llu,", (unsigned long long)res->peak_bytes);
        csv_num(f, "%.8f", res->eval_loss);
        csv_num(f, "%.3e", res->loss_diff);
        csv_num(f, "%.3e", row->is_baseline || row->loss_tol < 0 ? NAN : row->loss_tol);
        csv_num(f, "%.3e", res->logits_max_abs);
        csv_num(f, "%.3e", res->logits_max_rel);
        csv_num(f, "%.3e", row->is_baseline ? NAN : row->logits_tol);
        fprintf(f, "%d,", res->finite);
        csv_text(f, res->error);
        fputc('\n', f);
    }
    return close_out(f, path);
}

/* ---- JSON ----------------------------------------------------------------- */

static void json_text(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

/* a JSON number, or null for NaN and infinities (JSON has neither) */
static void json_num(FILE *f, const char *fmt, double v) {
    if (isfinite(v)) fprintf(f, fmt, v);
    else fprintf(f, "null");
}

int ladder_report_json(const ladder_report *r, const char *path) {
    FILE *f = open_out(path);
    if (!f) return -1;
    const ladder_params *p = r->p;
    const ladder_shape *s = &p->shape;
    int all_pass = 1;
    fprintf(f, "{\n  \"tool\": \"gptx-bench\",\n  \"gptx_version\": \"%s\",\n", gptx_version());
    fprintf(f, "  \"config\": {\"name\": \"%s\", \"vocab\": %d, \"padded_vocab\": %d, \"seq\": %d, "
               "\"layers\": %d, \"heads\": %d, \"width\": %d, \"batch\": %d},\n",
            s->name, s->vocab, s->padded_vocab, s->seq, s->layers, s->heads, s->width, s->batch);
    fprintf(f, "  \"mode\": \"%s\",\n", p->mode);
    fprintf(f, "  \"run\": {\"threads\": %d, \"warmup\": %d, \"steps\": %d, \"repeats\": %d, "
               "\"total_steps\": %lld, \"seed\": %llu, \"tolerance_scale\": %g, "
               "\"token_budget\": %lld, \"wall_s\": %.3f},\n",
            r->res[0].threads, p->warmup, p->steps, p->repeats, (long long)ladder_total_steps(p),
            (unsigned long long)p->seed, p->tolerance_scale, (long long)ladder_report_budget(r),
            r->wall_s);
    fprintf(f, "  \"machine\": {\"cpu\": ");
    json_text(f, r->cpu);
    fprintf(f, ", \"online_cpus\": %d, \"load_start\": \"%s\", \"load_end\": \"%s\"},\n",
            r->online_cpus, r->load_start, r->load_end);
    fprintf(f, "  \"data\": {\"text\": ");
    json_text(f, r->text_path);
    fprintf(f, ", \"tokens\": %zu, \"train_tokens\": %zu, \"eval_tokens\": %zu},\n", r->n_tokens,
            r->n_train, r->n_eval);
    fprintf(f, "  \"timing_scope\": \"%s\",\n", TIMING_SCOPE);
    fprintf(f, "  \"note\": \"%s\",\n  \"rows\": [\n", NOTE_MULTIPLY);
    for (int i = 0; i < r->n; i++) {
        const ladder_row *row = &r->rows[i];
        const ladder_result *res = &r->res[i];
        fprintf(f, "    {\"index\": %d, \"key\": \"%s\", \"row\": ", i, row->key);
        json_text(f, row->label);
        fprintf(f, ", \"change\": ");
        json_text(f, row->change);
        fprintf(f, ", \"status\": ");
        json_text(f, status_of(r, i));
        fprintf(f, ", \"available\": %s", row->available ? "true" : "false");
        if (row->available) {
            all_pass &= res->pass;
            char desc[256];
            ladder_variant_describe(&row->v, s, desc, sizeof desc);
            fprintf(f, ",\n     \"variant\": ");
            json_text(f, desc);
            fprintf(f, ", \"pass\": %s, \"finite\": %s, \"batch\": %d, \"tokens_per_step\": %lld, "
                       "\"updates_per_budget\": %.6g,\n",
                    res->pass ? "true" : "false", res->finite ? "true" : "false", res->B,
                    (long long)res->tokens_per_step, updates_per_budget(r, i));
            fprintf(f, "     \"tokens_per_s\": {\"median\": ");
            json_num(f, "%.3f", res->ran ? res->tps_median : NAN);
            fprintf(f, ", \"min\": ");
            json_num(f, "%.3f", res->ran ? res->tps_min : NAN);
            fprintf(f, ", \"max\": ");
            json_num(f, "%.3f", res->ran ? res->tps_max : NAN);
            fprintf(f, ", \"repeats\": %lld}, \"speedup_vs_baseline\": ", (long long)res->repeats);
            json_num(f, "%.4f", speedup(r, i, 0));
            fprintf(f, ", \"speedup_vs_previous\": ");
            json_num(f, "%.4f", speedup(r, i, previous_row(r, i)));
            fprintf(f, ",\n     \"cold_start_s\": ");
            json_num(f, "%.6f", res->ran ? res->cold_start_s : NAN);
            fprintf(f, ", \"first_step_s\": ");
            json_num(f, "%.6f", res->ran ? res->first_step_s : NAN);
            fprintf(f, ", \"create_s\": ");
            json_num(f, "%.6f", res->ran ? res->create_s : NAN);
            fprintf(f, ", \"peak_bytes\": %llu,\n     \"eval_loss\": ",
                    (unsigned long long)res->peak_bytes);
            json_num(f, "%.8f", res->eval_loss);
            fprintf(f, ", \"loss_abs_diff\": ");
            json_num(f, "%.3e", res->loss_diff);
            fprintf(f, ", \"loss_tol\": ");
            json_num(f, "%.3e", row->is_baseline || row->loss_tol < 0 ? NAN : row->loss_tol);
            fprintf(f, ", \"logits_max_abs_diff\": ");
            json_num(f, "%.3e", res->logits_max_abs);
            fprintf(f, ", \"logits_max_rel_diff\": ");
            json_num(f, "%.3e", res->logits_max_rel);
            fprintf(f, ", \"logits_tol\": ");
            json_num(f, "%.3e", row->is_baseline ? NAN : row->logits_tol);
            fprintf(f, ", \"error\": ");
            json_text(f, res->error);
        }
        fprintf(f, "}%s\n", i + 1 < r->n ? "," : "");
    }
    fprintf(f, "  ],\n  \"all_pass\": %s\n}\n", all_pass ? "true" : "false");
    return close_out(f, path);
}

/* ---- SVG ------------------------------------------------------------------ */

static void svg_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
}

int ladder_report_svg(const ladder_report *r, const char *path) {
    FILE *f = open_out(path);
    if (!f) return -1;
    const double left = 250, bar_w = 470, top = 60, row_h = 26;
    const double width = left + bar_w + 190, height = top + row_h * r->n + 60;
    double xmax = 0;
    for (int i = 0; i < r->n; i++)
        if (r->rows[i].available && r->res[i].ran) xmax = fmax(xmax, r->res[i].tps_max);
    if (!(xmax > 0)) xmax = 1;
    /* at most 5 ticks, each 1, 2, 2.5 or 5 times a power of ten */
    double raw = xmax / 5, tick = pow(10.0, floor(log10(raw)));
    static const double steps[] = {1, 2, 2.5, 5, 10};
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++)
        if (tick * steps[k] >= raw) {
            tick *= steps[k];
            break;
        }
    int n_ticks = (int)ceil(xmax / tick - 1e-9);
    xmax = tick * n_ticks;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n"
               "<rect width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n",
            width, height, width, height);
    fprintf(f, "<text x=\"%.0f\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">gptx-bench: "
               "tokens/s per row — config %s, mode %s, %d threads</text>\n",
            width / 2, r->p->shape.name, r->p->mode, r->res[0].threads);
    fprintf(f, "<text x=\"%.0f\" y=\"40\" fill=\"#555\" text-anchor=\"middle\">median over %d "
               "repeats of %d training step%s (zero_grad + forward + backward + AdamW), whiskers "
               "min–max; red = numerics FAIL</text>\n",
            width / 2, r->p->repeats, r->p->steps, r->p->steps == 1 ? "" : "s");
    for (int t = 0; t <= n_ticks; t++) {
        double x = left + bar_w * t / n_ticks;
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.0f\" y2=\"%.0f\" stroke=\"#eee\"/>\n", x,
                x, top - 4, top + row_h * r->n);
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\" fill=\"#555\">%.0f</text>\n",
                x, top + row_h * r->n + 16, tick * t);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">tokens/s</text>\n",
            left + bar_w / 2, top + row_h * r->n + 34);
    for (int i = 0; i < r->n; i++) {
        const ladder_row *row = &r->rows[i];
        const ladder_result *res = &r->res[i];
        double y = top + row_h * i;
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">", left - 8, y + row_h * 0.62);
        svg_text(f, row->label);
        fprintf(f, "</text>\n");
        if (!row->available || !res->ran) {
            fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" fill=\"%s\">", left + 6, y + row_h * 0.62,
                    row->available ? "#d62728" : "#888");
            svg_text(f, row->available ? "FAIL (error)" : row->na_reason);
            fprintf(f, "</text>\n");
            continue;
        }
        double w = bar_w * res->tps_median / xmax;
        const char *color = res->pass ? "#1f77b4" : "#d62728";
        fprintf(f, "<rect x=\"%.0f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n",
                left, y + 4, w, row_h - 8, color);
        double x0 = left + bar_w * res->tps_min / xmax, x1 = left + bar_w * res->tps_max / xmax;
        double ym = y + row_h / 2;
        fprintf(f, "<path d=\"M%.1f %.1fH%.1fM%.1f %.1fV%.1fM%.1f %.1fV%.1f\" stroke=\"#222\" "
                   "fill=\"none\"/>\n",
                x0, ym, x1, x0, ym - 5, ym + 5, x1, ym - 5, ym + 5);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%.0f (x%.2f)%s</text>\n", fmax(x1, left + w) + 6,
                y + row_h * 0.62, res->tps_median, speedup(r, i, 0),
                res->pass ? "" : " FAIL");
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#555\" text-anchor=\"middle\">(xN) = tokens/s "
               "relative to the baseline; speed-ups do not multiply</text>\n</svg>\n",
            width / 2, height - 6);
    return close_out(f, path);
}
