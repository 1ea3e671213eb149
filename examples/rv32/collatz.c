/* Collatz: the longest chain of steps to 1 among starts below 60. */
#include "tw_rt.h"

int main(void) {
    u32 best = 0, arg = 0;
    for (u32 n = 1; n < 60; n++) {
        u32 x = n, steps = 0;
        while (x != 1) { x = (x & 1) ? 3 * x + 1 : x >> 1; steps++; }
        if (steps > best) { best = steps; arg = n; }
    }
    tw_puts("collatz "); tw_putu(arg); tw_puts(" takes "); tw_putu(best); tw_puts("\n");
    return (int)best;
}
