/* bf16_ref.h — the tests' own bf16 rounding and the check for the bf16
 * V:N:M path (test_vnm_bf16.c, test_vnm_bf16_sddmm.c). Header-only (static
 * functions), so each test includes it once. */
#ifndef VENOM_TEST_BF16_REF_H
#define VENOM_TEST_BF16_REF_H

#include "gradcheck.h"

#include <string.h>

/* bf16(x) as a float: round to nearest even (no NaN or overflow here). */
static double bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1);
    u &= 0xffff0000u;
    float r;
    memcpy(&r, &u, 4);
    return r;
}

/* Whether this machine runs the bf16 path; leaves the precision at f32. */
static bool have_bf16(void)
{
    bool ok = vn_vnm_set_precision(VN_VNM_BF16) == VN_OK;
    CHECK_OK(vn_vnm_set_precision(VN_VNM_F32));
    return ok;
}

#endif
