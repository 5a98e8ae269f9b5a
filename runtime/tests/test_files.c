/* Files the runtime writes and reads: trace files that never follow what lies
 * at their path, NEFF files that must be regular and not too large. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"

/* A fresh private directory under /tmp; the caller removes it (rm_tree). */
static char *make_dir(void) {
  static char path[64];
  snprintf(path, sizeof(path), "/tmp/nkrt_files_XXXXXX");
  return mkdtemp(path);
}

static void rm_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char p[512];
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) rm_tree(p);
    else unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

static bool file_is(const char *path, const char *text) {
  char buf[256] = {0};
  FILE *f = fopen(path, "r");
  if (!f) return false;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strcmp(buf, text) == 0;
}

TEST(trace_file_replaces_planted_symlinks) {
  char *dir = make_dir();
  CHECK(dir != NULL);
  if (!dir) return;
  char victim[256], target[256], old_tmp[300];
  snprintf(victim, sizeof(victim), "%s/victim", dir);
  snprintf(target, sizeof(target), "%s/trace.json", dir);
  /* the name the writer used to open with fopen, following symlinks */
  snprintf(old_tmp, sizeof(old_tmp), "%s.tmp%d", target, (int)(getpid() % 100000));
  write_text(victim, "precious");
  CHECK(symlink(victim, target) == 0);
  CHECK(symlink(victim, old_tmp) == 0);

  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_trace_session_t *s = NULL;
  CHECK_OK(nkrt_trace_start(rt, -1, &s));
  nkrt_tensor_t *t = NULL;
  CHECK_OK(nkrt_tensor_allocate(rt, 0, 64, "t", &t));
  char bytes[64] = {0};
  CHECK_OK(nkrt_tensor_write(t, bytes, 0, sizeof(bytes)));
  nkrt_trace_stop(s);
  mode_t old_mask = umask(027);
  CHECK_OK(nkrt_trace_write_chrome(s, target));
  umask(old_mask);

  CHECK(file_is(victim, "precious")); /* nothing written through a symlink */
  struct stat st;
  CHECK(lstat(target, &st) == 0 && S_ISREG(st.st_mode));
  CHECK((st.st_mode & 07777) == 0640); /* 0666 less the umask, like any output file */
  char text[256] = {0};
  FILE *f = fopen(target, "r");
  CHECK(f != NULL);
  if (f) {
    CHECK(fread(text, 1, sizeof(text) - 1, f) > 0);
    fclose(f);
  }
  CHECK(strstr(text, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[") == text);
  CHECK(count_entries(dir) == 3); /* victim, trace.json, the old planted link: no temporary */

  /* a directory in the way: refused, nothing left behind */
  char sub[300];
  snprintf(sub, sizeof(sub), "%s/sub", dir);
  CHECK(mkdir(sub, 0700) == 0);
  char expect[1024];
  snprintf(expect, sizeof(expect), "cannot write trace file '%s': Is a directory", sub);
  CHECK_ERR(nkrt_trace_write_chrome(s, sub), NKRT_FAILURE, expect);
  CHECK(count_entries(sub) == 0 && count_entries(dir) == 4);
  /* a directory that does not exist */
  snprintf(expect, sizeof(expect), "cannot write trace file '%s/none/t.json': cannot create a "
           "temporary file in '%s/none/': No such file or directory (choose a path in a "
           "directory you can write)", dir, dir);
  snprintf(sub, sizeof(sub), "%s/none/t.json", dir);
  CHECK_ERR(nkrt_trace_write_chrome(s, sub), NKRT_FAILURE, expect);
  /* a bare file name goes to the current directory */
  char cwd[512];
  CHECK(getcwd(cwd, sizeof(cwd)) != NULL);
  CHECK(chdir(dir) == 0);
  CHECK_OK(nkrt_trace_write_chrome(s, "plain.json"));
  CHECK(chdir(cwd) == 0);
  snprintf(expect, sizeof(expect), "%s/plain.json", dir);
  CHECK(access(expect, R_OK) == 0 && count_entries(dir) == 5);

  nkrt_tensor_release(t);
  nkrt_trace_destroy(s);
  nkrt_runtime_destroy(rt);
  rm_tree(dir);
}

/* Saves an environment variable and restores it at the end of a test. */
typedef struct {
  const char *name;
  char *value;
} saved_env_t;

static saved_env_t env_save(const char *name) {
  const char *v = getenv(name);
  return (saved_env_t){name, v ? strdup(v) : NULL};
}

static void env_restore(saved_env_t *s) {
  if (s->value) setenv(s->name, s->value, 1);
  else unsetenv(s->name);
  free(s->value);
}

TEST(neff_file_must_be_a_regular_file) {
  saved_env_t cap = env_save("NKRT_MAX_NEFF_SIZE");
  unsetenv("NKRT_MAX_NEFF_SIZE");
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_model_t *m = NULL;
  /* /dev/zero used to be read until memory ran out */
  CHECK_ERR(nkrt_model_load_file(rt, "/dev/zero", 0, NULL, &m), NKRT_FAILURE,
            "cannot load NEFF file '/dev/zero': it is a character device, not a regular file "
            "(give the path of a .neff file)");
  char *dir = make_dir();
  CHECK(dir != NULL);
  if (!dir) return;
  /* a FIFO with no writer used to block the open forever */
  char fifo[300], expect[1024];
  snprintf(fifo, sizeof(fifo), "%s/pipe.neff", dir);
  CHECK(mkfifo(fifo, 0600) == 0);
  snprintf(expect, sizeof(expect), "cannot load NEFF file '%s': it is a FIFO (named pipe), not a "
           "regular file", fifo);
  CHECK_ERR(nkrt_model_load_file(rt, fifo, 0, NULL, &m), NKRT_FAILURE, expect);
  snprintf(expect, sizeof(expect), "cannot load NEFF file '%s': it is a directory, not a "
           "regular file", dir);
  CHECK_ERR(nkrt_model_load_file(rt, dir, 0, NULL, &m), NKRT_FAILURE, expect);
  /* a symlink is judged by what it points to */
  char link[300];
  snprintf(link, sizeof(link), "%s/zero.neff", dir);
  CHECK(symlink("/dev/zero", link) == 0);
  snprintf(expect, sizeof(expect), "cannot load NEFF file '%s': it is a character device", link);
  CHECK_ERR(nkrt_model_load_file(rt, link, 0, NULL, &m), NKRT_FAILURE, expect);
  CHECK(m == NULL);
  nkrt_runtime_destroy(rt);
  rm_tree(dir);
  env_restore(&cap);
}

TEST(neff_file_size_cap) {
  saved_env_t cap = env_save("NKRT_MAX_NEFF_SIZE");
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_model_t *m = NULL;
  const char *add = nkrt_test_neff("add");
  struct stat st;
  CHECK(stat(add, &st) == 0 && st.st_size > 1024);
  char expect[1024], text[64];
  setenv("NKRT_MAX_NEFF_SIZE", "1K", 1);
  snprintf(expect, sizeof(expect), "cannot load NEFF file '%s': it is %lld bytes, over the limit "
           "of 1024 bytes (NKRT_MAX_NEFF_SIZE; raise it if this NEFF is genuine)", add,
           (long long)st.st_size);
  CHECK_ERR(nkrt_model_load_file(rt, add, 0, NULL, &m), NKRT_FAILURE, expect);
  /* exactly at the cap loads */
  snprintf(text, sizeof(text), "%lld", (long long)st.st_size);
  setenv("NKRT_MAX_NEFF_SIZE", text, 1);
  CHECK_OK(nkrt_model_load_file(rt, add, 0, NULL, &m));
  nkrt_model_release(m);
  m = NULL;
  snprintf(text, sizeof(text), "%lld", (long long)st.st_size - 1);
  setenv("NKRT_MAX_NEFF_SIZE", text, 1);
  CHECK_ERR(nkrt_model_load_file(rt, add, 0, NULL, &m), NKRT_FAILURE, "over the limit");
  /* the variable is parsed strictly */
  setenv("NKRT_MAX_NEFF_SIZE", "lots", 1);
  CHECK_ERR(nkrt_model_load_file(rt, add, 0, NULL, &m), NKRT_INVALID,
            "NKRT_MAX_NEFF_SIZE: invalid size \"lots\": expected a number such as 4G (unset it "
            "for the default of 1G)");
  setenv("NKRT_MAX_NEFF_SIZE", "0", 1);
  CHECK_ERR(nkrt_model_load_file(rt, add, 0, NULL, &m), NKRT_INVALID,
            "NKRT_MAX_NEFF_SIZE: invalid size \"0\": it must be at least 1");
  setenv("NKRT_MAX_NEFF_SIZE", "2Q", 1);
  CHECK_ERR(nkrt_model_load_file(rt, add, 0, NULL, &m), NKRT_INVALID,
            "NKRT_MAX_NEFF_SIZE: invalid size \"2Q\"");
  unsetenv("NKRT_MAX_NEFF_SIZE");
  CHECK_OK(nkrt_model_load_file(rt, add, 0, NULL, &m)); /* the 1 GiB default */
  nkrt_model_release(m);
  nkrt_runtime_destroy(rt);
  env_restore(&cap);
}
