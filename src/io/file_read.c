/* Reading whole files (file_read.h). */
#define _POSIX_C_SOURCE 200809L /* pread */
#include "file_read.h"

#include "../core/core.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

nb_code nbio_io_error(nb_ctx *c, const char *who, const char *what, const char *path) {
  return nbcore_fail(c, NB_IO, "%s: %s %s: %s", who, what, path, strerror(errno));
}

nb_code nbio_read_file(nb_ctx *c, const char *who, const char *path, uint8_t **out, size_t *n) {
  *out = NULL;
  *n = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nbio_io_error(c, who, "cannot open", path);
  struct stat st;
  nb_code bad = fstat(fd, &st) != 0    ? nbio_io_error(c, who, "cannot stat", path)
                : !S_ISREG(st.st_mode) ? nbcore_fail(c, NB_IO, "%s: %s is not a regular file", who, path)
                                       : NB_OK;
  if (bad) {
    close(fd);
    return bad;
  }
  uint8_t *buf = malloc((size_t)st.st_size + 1);
  int64_t got = buf ? io_pread_full(fd, buf, (size_t)st.st_size, 0) : 0;
  close(fd);
  if (!buf) return nbcore_fail(c, NB_NOMEM, "%s: out of memory reading %s", who, path);
  if (got < (int64_t)st.st_size) {
    free(buf);
    return got >= 0 ? nbcore_fail(c, NB_CORRUPT, "%s: %s shrank while being read", who, path)
                    : nbio_io_error(c, who, "cannot read", path);
  }
  *out = buf;
  *n = (size_t)got;
  return NB_OK;
}
