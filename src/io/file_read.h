/* Reading helpers the file readers (.npy, checkpoints, SavedModels) share. */
#ifndef NBIO_FILE_READ_H
#define NBIO_FILE_READ_H

#include <nabla.h>

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

/* NB_IO on c: "<who>: <what> <path>: <strerror(errno)>". */
nb_code nbio_io_error(nb_ctx *c, const char *who, const char *what, const char *path);
/* Reads the whole regular file at path into *out (malloc'd, one spare byte) and *n; errors
   on c naming who and the file: NB_IO (cannot open or read it, not a regular file),
   NB_CORRUPT (it shrank while being read), NB_NOMEM. */
nb_code nbio_read_file(nb_ctx *c, const char *who, const char *path, uint8_t **out, size_t *n);

#endif
