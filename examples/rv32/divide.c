/* Division-heavy loop: digits of many numbers by repeated / and %, signed and unsigned. */
#include "tw_rt.h"

int main(void) {
    u32 digits = 0;
    i32 s = 0;
    for (u32 n = 1; n < 9; n++) {
        u32 m = n * 7919u;
        while (m) { digits += m % 10u; m /= 10u; }
        s += (i32)(n * 37) / -7 + (i32)(n * 37) % -7;
    }
    tw_puts("digits "); tw_putu(digits); tw_puts(" s "); tw_puti(s); tw_puts("\n");
    return 0;
}
