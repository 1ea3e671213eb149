/* CRC-32 (reflected, 0xEDB88320) of a short text, bit by bit. */
#include "tw_rt.h"

static const char text[] = "transformers all the way down";

int main(void) {
    u32 crc = 0xFFFFFFFFu;
    for (const char *p = text; *p; p++) {
        crc ^= (u8)*p;
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    crc = ~crc;
    tw_puts("crc32 "); tw_puthex(crc); tw_puts("\n");
    return (int)(crc & 127);
}
