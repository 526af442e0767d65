/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as LevelDB tables and TF's
   bundles store it. Two paths give the same bits: the SSE4.2 crc32 instruction, 8 bytes
   at a time, where the CPU has it (checked once at run time), else slicing-by-8: eight
   tables, table[k][b] being the CRC of byte b followed by k zero bytes, so that one step
   folds 8 bytes with 8 independent look-ups instead of 8 dependent ones. Checkpoints CRC
   every byte they write or read, so a byte-at-a-time loop (~0.4 GB/s) would cost more
   than the fsync. */
#include "table.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define CRC_HAVE_SSE42 1
#endif

#define CRC_POLY 0x82F63B78u

static uint32_t crc_tables[8][256];
static uint32_t (*crc_update)(uint32_t crc, const uint8_t *p, size_t n);
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

/* crc is the register (inverted): slicing-by-8 over whole words, bytes for the rest. */
static uint32_t update_sliced(uint32_t crc, const uint8_t *p, size_t n) {
  for (; n >= 8; p += 8, n -= 8) {
    uint32_t lo = crc ^ nbio_load_le32(p), hi = nbio_load_le32(p + 4);
    crc = crc_tables[7][lo & 0xff] ^ crc_tables[6][(lo >> 8) & 0xff] ^ crc_tables[5][(lo >> 16) & 0xff] ^
          crc_tables[4][lo >> 24] ^ crc_tables[3][hi & 0xff] ^ crc_tables[2][(hi >> 8) & 0xff] ^
          crc_tables[1][(hi >> 16) & 0xff] ^ crc_tables[0][hi >> 24];
  }
  for (; n > 0; p++, n--) crc = crc_tables[0][(crc ^ *p) & 0xff] ^ (crc >> 8);
  return crc;
}

#ifdef CRC_HAVE_SSE42
__attribute__((target("sse4.2"))) static uint32_t update_sse42(uint32_t crc, const uint8_t *p, size_t n) {
  uint64_t c = crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    memcpy(&word, p, sizeof word); /* unaligned load; x86 is little-endian */
    c = _mm_crc32_u64(c, word);
  }
  uint32_t c32 = (uint32_t)c;
  for (; n > 0; p++, n--) c32 = _mm_crc32_u8(c32, *p);
  return c32;
}
#endif

static void crc_init(void) {
  for (uint32_t b = 0; b < 256; b++) {
    uint32_t r = b;
    for (int k = 0; k < 8; k++) r = r & 1 ? (r >> 1) ^ CRC_POLY : r >> 1;
    crc_tables[0][b] = r;
  }
  for (int k = 1; k < 8; k++)
    for (int b = 0; b < 256; b++)
      crc_tables[k][b] = crc_tables[0][crc_tables[k - 1][b] & 0xff] ^ (crc_tables[k - 1][b] >> 8);
  crc_update = update_sliced;
#ifdef CRC_HAVE_SSE42
  if (__builtin_cpu_supports("sse4.2")) crc_update = update_sse42;
#endif
}

uint32_t nbio_crc32c(uint32_t crc, const void *data, size_t n) {
  pthread_once(&crc_once, crc_init);
  return ~crc_update(~crc, data, n);
}

uint32_t nbio_crc32c_portable(uint32_t crc, const void *data, size_t n) {
  pthread_once(&crc_once, crc_init);
  return ~update_sliced(~crc, data, n);
}
