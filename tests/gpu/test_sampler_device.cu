/* Sampler equivalence on the device: a one-thread kernel runs lib/sample/sampling.h
 * (gptx_sampling_uniform + gptx_sample_row, compiled __host__ __device__)
 * on the same logits, seed, stream and counters as the host sampler
 * (gptx_sampler_sample) and must pick the same token every time: greedy,
 * temperature, top-k, top-p and their combinations, over the GPT-2 vocabulary
 * padded to 50304 with the padding at -inf, with ties and -inf tokens.
 * Exits 77 without a CUDA device. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gptx/gptx.h"
#include "sampling.h"

#define VOCAB 50257
#define PADDED 50304
#define DRAWS 8 /* one GPU thread heapifies 50257 ids per top-k/top-p draw: slow */

static __global__ void k_sample(const float *logits, int vocab, double temperature, int top_k,
                                double top_p, uint64_t seed, uint64_t stream, int draws, double *w,
                                int32_t *idx, int32_t *tokens, int *rcs) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    for (int d = 0; d < draws; d++) {
        double u = gptx_sampling_uniform(seed, stream, (uint64_t)d);
        int bad = -1;
        rcs[d] =
            gptx_sample_row(logits, vocab, temperature, top_k, top_p, u, w, idx, &tokens[d], &bad);
    }
}

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(void) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("test_sampler_device: SKIPPED, no CUDA device\n");
        return 77;
    }
    float *logits = (float *)malloc(PADDED * sizeof(float));
    uint64_t s = 12345;
    for (int i = 0; i < PADDED; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        /* a spread like a trained model's: most tokens far below the top */
        double u = (double)(s >> 11) / 9007199254740992.0;
        logits[i] = (float)(8.0 * u * u * u - 4.0);
    }
    for (int i = VOCAB; i < PADDED; i++) logits[i] = -INFINITY; /* masked padding */
    logits[17] = logits[4242] = 4.5f;                           /* a tie at the top */
    logits[100] = logits[101] = -INFINITY;                      /* probability 0 */

    float *dl = NULL;
    double *dw = NULL;
    int32_t *didx = NULL, *dtok = NULL;
    int *drc = NULL;
    CUDA_OK(cudaMalloc((void **)&dl, PADDED * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&dw, VOCAB * sizeof(double)));
    CUDA_OK(cudaMalloc((void **)&didx, VOCAB * sizeof(int32_t)));
    CUDA_OK(cudaMalloc((void **)&dtok, DRAWS * sizeof(int32_t)));
    CUDA_OK(cudaMalloc((void **)&drc, DRAWS * sizeof(int)));
    CUDA_OK(cudaMemcpy(dl, logits, PADDED * sizeof(float), cudaMemcpyHostToDevice));

    const float temps[] = {0.0f, 0.7f, 1.3f};
    const int ks[] = {0, 5, 40};
    const float ps[] = {1.0f, 0.9f, 0.5f};
    int configs = 0, mismatches = 0;
    for (int ti = 0; ti < 3; ti++)
        for (int ki = 0; ki < 3; ki++)
            for (int pi = 0; pi < 3; pi++) {
                gptx_sampler_options o;
                gptx_sampler_options_init(&o);
                o.temperature = temps[ti];
                o.top_k = ks[ki];
                o.top_p = ps[pi];
                o.seed = 1000 + (uint64_t)configs;
                o.stream = 7;
                gptx_sampler *hs = NULL;
                REQUIRE_OK(gptx_sampler_create(&hs, &o));
                int32_t host[DRAWS], dev[DRAWS];
                int rcs[DRAWS];
                for (int d = 0; d < DRAWS; d++)
                    CHECK_OK(gptx_sampler_sample(hs, logits, PADDED, VOCAB, &host[d]));
                gptx_sampler_destroy(hs);
                k_sample<<<1, 1>>>(dl, VOCAB, (double)o.temperature, o.top_k, (double)o.top_p,
                                   o.seed, o.stream, DRAWS, dw, didx, dtok, drc);
                CUDA_OK(cudaGetLastError());
                CUDA_OK(cudaMemcpy(dev, dtok, sizeof dev, cudaMemcpyDeviceToHost));
                CUDA_OK(cudaMemcpy(rcs, drc, sizeof rcs, cudaMemcpyDeviceToHost));
                int bad = 0;
                for (int d = 0; d < DRAWS; d++)
                    bad += rcs[d] != GPTX_SAMPLE_OK || dev[d] != host[d];
                if (bad)
                    fprintf(stderr,
                            "temperature %g top_k %d top_p %g: %d of %d draws differ "
                            "(first: host %d device %d)\n",
                            (double)o.temperature, o.top_k, (double)o.top_p, bad, DRAWS, host[0],
                            dev[0]);
                mismatches += bad;
                configs++;
            }
    printf("test_sampler_device: %d configurations x %d draws, %d mismatches\n", configs, DRAWS,
           mismatches);
    CHECK(mismatches == 0);
    cudaFree(dl);
    cudaFree(dw);
    cudaFree(didx);
    cudaFree(dtok);
    cudaFree(drc);
    free(logits);
    return check_exit("test_sampler_device");
}
