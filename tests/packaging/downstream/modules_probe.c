/* Built against an installed gptx by tests/packaging/modules_hidden.sh: what
 * a CPU-only program gets when the CUDA and MPI libraries may be missing.
 *   modules_probe    prints the features, trains one step on the CPU, then
 *                    asks for the cuda backend and the MPI engine and prints
 *                    each answer as "cuda: STATUS: message" / "mpi: ...".
 * Exits 0 when the CPU step worked, whatever the other two answered (the
 * script decides what they should have been). */
#include <gptx/gptx.h>

#include <stdint.h>
#include <stdio.h>

static void report(const char *what, int rc) {
    printf("%s: %s: %s\n", what, gptx_status_name(rc), rc == GPTX_OK ? "" : gptx_last_error());
}

static int cpu_step(void) {
    gptx_context_options co;
    gptx_context_options_init(&co);
    co.backend = GPTX_BACKEND_CPU;
    co.num_threads = 1;
    gptx_context *ctx = NULL;
    gptx_model *m = NULL;
    gptx_model_config c;
    gptx_model_config_init(&c);
    c.vocab_size = 32;
    c.padded_vocab_size = 32;
    c.context_length = 8;
    c.n_layer = 1;
    c.n_head = 2;
    c.n_embd = 16;
    int32_t in[8], tg[8];
    for (int i = 0; i < 8; i++) in[i] = i, tg[i] = (i + 1) % 32;
    float loss = 0;
    int rc = gptx_context_create(&ctx, &co);
    if (rc == GPTX_OK) rc = gptx_model_create(&m, ctx, &c);
    if (rc == GPTX_OK) rc = gptx_model_init_random(m, 1);
    if (rc == GPTX_OK) rc = gptx_model_forward_backward(m, in, tg, 1, 8, 1.0f, &loss);
    report("cpu", rc);
    if (rc == GPTX_OK) printf("cpu loss %.4f\n", (double)loss);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
    return rc;
}

int main(void) {
    unsigned f = gptx_features();
    printf("features: cuda %d nccl %d mpi %d\n", !!(f & GPTX_FEATURE_CUDA),
           !!(f & GPTX_FEATURE_NCCL), !!(f & GPTX_FEATURE_MPI));
    int cpu = cpu_step();

    gptx_context_options co;
    gptx_context_options_init(&co);
    co.backend = GPTX_BACKEND_CUDA;
    gptx_context *ctx = NULL;
    report("cuda", gptx_context_create(&ctx, &co));
    gptx_context_destroy(ctx);

    /* the MPI engine by name on a CPU context (world size 1 without mpirun) */
    co.backend = GPTX_BACKEND_CPU;
    ctx = NULL;
    gptx_comm *comm = NULL;
    int rc = gptx_context_create(&ctx, &co);
    gptx_comm_options mo;
    gptx_comm_options_init(&mo);
    mo.engine = GPTX_COMM_MPI;
    if (rc == GPTX_OK) rc = gptx_comm_create(&comm, ctx, &mo);
    report("mpi", rc);
    gptx_comm_destroy(comm);
    gptx_context_destroy(ctx);
    return cpu == GPTX_OK ? 0 : 1;
}
