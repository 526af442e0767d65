/* Reading helpers the file readers (.npy, checkpoints) share. */
#ifndef NBIO_FILE_READ_H
#define NBIO_FILE_READ_H

#include <errno.h>
#include <stdint.h>
#include <unistd.h>

/* Reads up to n bytes at offset at, retrying short reads and EINTR: the count read (less
   than n only at the end of the file), or -1 with errno set. */
static inline int64_t io_pread_full(int fd, void *dst, size_t n, uint64_t at) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, (uint8_t *)dst + got, n - got, (off_t)(at + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += (size_t)r;
  }
  return (int64_t)got;
}

#endif
