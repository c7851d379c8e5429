/* Checksums of what gptx writes into its safetensors files: one per tensor
 * over its fp32 values, one over the metadata. A change confined to one
 * 64-bit word of the input (any number of flipped bits in it) always changes
 * the sum: each step maps the running state bijectively, and the word enters
 * through an injective (xor, then odd multiply) step. Other damage goes
 * unnoticed with a chance of about 2^-64. Not a cryptographic hash: it
 * catches a bad disk or transfer, not an adversary. */
#ifndef GPTX_CHECKSUM_H
#define GPTX_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

/* The metadata of a file with checksums: GPTX_CHECKSUM_ALG_KEY names the
 * algorithm, GPTX_CHECKSUM_PREFIX + a tensor's name holds its sum and
 * GPTX_CHECKSUM_META_KEY the sum of every other metadata pair, each as 16
 * hex digits. */
#define GPTX_CHECKSUM_NAME "gptx-mix64-1"
#define GPTX_CHECKSUM_ALG_KEY "checksum_algorithm"
#define GPTX_CHECKSUM_PREFIX "checksum."
#define GPTX_CHECKSUM_META_KEY "checksum.__metadata__"

/* Over the bit patterns of n floats, two per word (even index low): the same
 * sum on any host byte order. */
uint64_t gptx_checksum_f32(const float *x, size_t n);

/* Over n bytes, eight per word (little-endian, the tail padded with zeros). */
uint64_t gptx_checksum_bytes(const void *p, size_t n);

/* Over n (key, value) string pairs in key order, leaving out skip_key:
 * "key\0value\0..." through gptx_checksum_bytes. *ok = 0 when out of memory. */
uint64_t gptx_checksum_pairs(const char *const *kv, size_t n, const char *skip_key, int *ok);

/* Whether loads verify checksums: yes, unless the environment has
 * GPTX_SKIP_CHECKSUMS=1 (a huge file read often, on storage already
 * trusted). */
int gptx_checksums_verified(void);

#endif
