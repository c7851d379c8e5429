/* Philox4x32-10 against the known-answer vectors published with Random123. */
#include "check.h"
#include "philox.h"

static void kat(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1,
                uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    gptx_philox4 c = {{c0, c1, c2, c3}};
    gptx_philox4 r = gptx_philox4x32_10(c, k0, k1);
    if (r.v[0] != r0 || r.v[1] != r1 || r.v[2] != r2 || r.v[3] != r3) {
        fprintf(stderr, "philox KAT mismatch: got %08x %08x %08x %08x want %08x %08x %08x %08x\n",
                r.v[0], r.v[1], r.v[2], r.v[3], r0, r1, r2, r3);
        check_failures++;
    }
}

int main(void) {
    kat(0, 0, 0, 0, 0, 0, 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u);
    kat(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu,
        0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu);
    kat(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u,
        0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u);
    /* uniform draws never hit 0 and stay in (0, 1] */
    CHECK(gptx_uniform_open0(0u) > 0.0f && gptx_uniform_open0(0xffffffffu) <= 1.0f);
    return check_exit("test_philox");
}
