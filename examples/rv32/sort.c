/* Insertion sort of a pseudo-random array; prints whether it is sorted, its ends and a
   checksum (hex: no division). */
#include "tw_rt.h"

#define N 64
static i32 v[N];

int main(void) {
    u32 x = 12345;
    for (int i = 0; i < N; i++) { x = x * 1103515245u + 12345u; v[i] = (i32)((x >> 16) & 1023) - 512; }
    for (int i = 1; i < N; i++) {
        i32 key = v[i];
        int j = i - 1;
        while (j >= 0 && v[j] > key) { v[j + 1] = v[j]; j--; }
        v[j + 1] = key;
    }
    u32 sum = 0;
    int sorted = 1;
    for (int i = 0; i < N; i++) {
        sum = sum * 31u + (u32)v[i];
        if (i && v[i - 1] > v[i]) sorted = 0;
    }
    tw_puts(sorted ? "sorted " : "NOT sorted "); tw_puti(v[0]); tw_puts(".."); tw_puti(v[N - 1]);
    tw_puts(" "); tw_puthex(sum); tw_puts("\n");
    return sorted;
}
