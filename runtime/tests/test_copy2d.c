/* 2-D (pitched) tensor copies: results, tracing and every error path. */
#include <stdint.h>
#include <stdlib.h>

#include "test.h"

static nkrt_tensor_t *alloc(nkrt_runtime_t *rt, uint32_t core, uint64_t size, const char *name) {
  nkrt_tensor_t *t = NULL;
  CHECK_OK(nkrt_tensor_allocate(rt, core, size, name, &t));
  return t;
}

TEST(copy2d_write_read_results) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_tensor_t *t = alloc(rt, 0, 256, "t");
  uint8_t zero[256] = {0}, host[64], back[256];
  for (int i = 0; i < 64; i++) host[i] = (uint8_t)(i + 1);
  CHECK_OK(nkrt_tensor_write(t, zero, 0, sizeof(zero)));
  /* 4 rows of 8 bytes: host rows 16 apart, device rows 32 apart from offset 8 */
  CHECK_OK(nkrt_tensor_write_2d(t, host, 16, 8, 32, 8, 4));
  CHECK_OK(nkrt_tensor_read(t, back, 0, sizeof(back)));
  int bad = 0;
  for (int i = 0; i < 256; i++) {
    int row = (i - 8) / 32, col = (i - 8) % 32;
    uint8_t want = (i >= 8 && row < 4 && col < 8) ? host[row * 16 + col] : 0;
    bad += back[i] != want;
  }
  CHECK(bad == 0);
  /* read them back packed (dst_pitch 8) and with a wider host pitch */
  uint8_t packed[32], wide[4 * 12];
  CHECK_OK(nkrt_tensor_read_2d(t, packed, 8, 8, 32, 8, 4));
  memset(wide, 0xEE, sizeof(wide));
  CHECK_OK(nkrt_tensor_read_2d(t, wide, 12, 8, 32, 8, 4));
  bad = 0;
  for (int r = 0; r < 4; r++)
    for (int c = 0; c < 12; c++) {
      if (c < 8) bad += packed[r * 8 + c] != host[r * 16 + c];
      bad += wide[r * 12 + c] != (c < 8 ? host[r * 16 + c] : 0xEE);
    }
  CHECK(bad == 0);
  /* src_pitch 0 repeats one row (padding a bucket with a fill row) */
  uint8_t fill[8] = {9, 9, 9, 9, 9, 9, 9, 9};
  CHECK_OK(nkrt_tensor_write_2d(t, fill, 0, 128, 16, 8, 8));
  CHECK_OK(nkrt_tensor_read(t, back, 0, sizeof(back)));
  bad = 0;
  for (int r = 0; r < 8; r++)
    for (int c = 0; c < 16; c++) bad += back[128 + r * 16 + c] != (c < 8 ? 9 : 0);
  CHECK(bad == 0);
  /* dense pitches are one contiguous copy */
  CHECK_OK(nkrt_tensor_write_2d(t, host, 8, 0, 8, 8, 8));
  CHECK_OK(nkrt_tensor_read(t, back, 0, 64));
  CHECK(memcmp(back, host, 64) == 0);
  /* empty copies: nothing moves, NULL buffers are fine, offset may be the end */
  CHECK_OK(nkrt_tensor_write_2d(t, NULL, 0, 256, 0, 0, 5));
  CHECK_OK(nkrt_tensor_write_2d(t, NULL, 0, 0, 0, 8, 0));
  CHECK_OK(nkrt_tensor_read_2d(t, NULL, 0, 256, 0, 8, 0));
  /* one row: the destination pitch does not matter */
  CHECK_OK(nkrt_tensor_write_2d(t, host, 0, 248, 0, 8, 1));
  nkrt_tensor_free(&t);
  nkrt_runtime_destroy(rt);
}

TEST(copy2d_device_copy_and_memset) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0,1", 1 << 20);
  nkrt_tensor_t *a = alloc(rt, 0, 128, "a");
  nkrt_tensor_t *b = alloc(rt, 1, 256, "b");
  uint8_t src[128], back[256];
  for (int i = 0; i < 128; i++) src[i] = (uint8_t)i;
  CHECK_OK(nkrt_tensor_write(a, src, 0, sizeof(src)));
  CHECK_OK(nkrt_tensor_memset(b, 0, 0, 256));
  /* pad 4 rows of 16 bytes into rows of 32 (a bucket), across cores */
  CHECK_OK(nkrt_tensor_copy_2d(a, 0, 16, b, 0, 32, 16, 4));
  CHECK_OK(nkrt_tensor_memset_2d(b, 0x7F, 16, 32, 16, 4));
  CHECK_OK(nkrt_tensor_read(b, back, 0, 128));
  int bad = 0;
  for (int r = 0; r < 4; r++)
    for (int c = 0; c < 32; c++) bad += back[r * 32 + c] != (c < 16 ? src[r * 16 + c] : 0x7F);
  CHECK(bad == 0);
  /* dense memset_2d */
  CHECK_OK(nkrt_tensor_memset_2d(b, 3, 128, 16, 16, 8));
  CHECK_OK(nkrt_tensor_read(b, back, 128, 128));
  bad = 0;
  for (int i = 0; i < 128; i++) bad += back[i] != 3;
  CHECK(bad == 0);
  /* overlapping source and destination with equal pitches: memmove semantics,
   * both directions (rows of 8 bytes 16 apart, shifted by 4 and by one row) */
  for (int dir = 0; dir < 2; dir++) {
    uint8_t ref[128], tmp[6 * 8];
    CHECK_OK(nkrt_tensor_write(a, src, 0, sizeof(src)));
    uint64_t so = dir ? 4 : 20, dofs = dir ? 20 : 4;
    /* the reference: every source row read before any row is written */
    memcpy(ref, src, sizeof(ref));
    for (int r = 0; r < 6; r++) memcpy(tmp + r * 8, src + so + r * 16, 8);
    for (int r = 0; r < 6; r++) memcpy(ref + dofs + r * 16, tmp + r * 8, 8);
    CHECK_OK(nkrt_tensor_copy_2d(a, so, 16, a, dofs, 16, 8, 6));
    CHECK_OK(nkrt_tensor_read(a, back, 0, 128));
    CHECK(memcmp(back, ref, 128) == 0);
  }
  /* overlapping and dense: one memmove */
  CHECK_OK(nkrt_tensor_write(a, src, 0, sizeof(src)));
  CHECK_OK(nkrt_tensor_copy_2d(a, 0, 8, a, 8, 8, 8, 8));
  CHECK_OK(nkrt_tensor_read(a, back, 8, 64));
  CHECK(memcmp(back, src, 64) == 0);
  /* interleaved rows (disjoint bytes, overlapping extents) need equal pitches */
  CHECK_OK(nkrt_tensor_copy_2d(a, 0, 16, a, 8, 16, 8, 4));
  CHECK_OK(nkrt_tensor_copy_2d(a, 0, 0, b, 0, 8, 8, 0)); /* empty */
  nkrt_tensor_free(&a);
  nkrt_tensor_free(&b);
  nkrt_runtime_destroy(rt);
}

TEST(copy2d_traced) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_tensor_t *t = alloc(rt, 0, 256, "pitched");
  uint8_t host[256] = {0};
  nkrt_trace_session_t *s = NULL;
  CHECK_OK(nkrt_trace_start(rt, -1, &s));
  CHECK_OK(nkrt_tensor_write_2d(t, host, 16, 0, 32, 12, 5));
  CHECK_OK(nkrt_tensor_read_2d(t, host, 12, 0, 32, 12, 5));
  CHECK_OK(nkrt_tensor_copy_2d(t, 0, 32, t, 200, 12, 12, 4));
  CHECK_OK(nkrt_tensor_memset_2d(t, 1, 0, 32, 12, 5)); /* not traced, like memset */
  nkrt_trace_stop(s);
  CHECK(nkrt_trace_event_count(s) == 6);
  char *json = NULL;
  CHECK_OK(nkrt_trace_events_json(s, false, &json, NULL));
  CHECK(json && strstr(json, "\"event_type\":\"tensor_write\"") != NULL);
  CHECK(json && strstr(json, "\"event_type\":\"tensor_read\"") != NULL);
  CHECK(json && strstr(json, "\"event_type\":\"tensor_copy\"") != NULL);
  CHECK(json && strstr(json, "\"bytes\":60") != NULL && strstr(json, "\"bytes\":48") != NULL);
  CHECK(json && strstr(json, "\"name\":\"pitched\"") != NULL);
  nkrt_free(json);
  nkrt_trace_destroy(s);
  nkrt_tensor_free(&t);
  nkrt_runtime_destroy(rt);
}

TEST(copy2d_errors) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_runtime_t *rt2 = nkrt_test_runtime("0", 1 << 20);
  nkrt_tensor_t *t = alloc(rt, 0, 128, "x");
  nkrt_tensor_t *u = alloc(rt, 0, 64, "y");
  nkrt_tensor_t *other = alloc(rt2, 0, 64, "z");
  uint8_t buf[256] = {0};
  const uint64_t big = UINT64_MAX / 2;
  /* write_2d */
  CHECK_ERR(nkrt_tensor_write_2d(NULL, buf, 16, 0, 16, 16, 2), NKRT_INVALID_HANDLE,
            "write_2d: tensor is NULL");
  CHECK_ERR(nkrt_tensor_write_2d(t, NULL, 16, 0, 16, 16, 2), NKRT_INVALID,
            "write_2d: source buffer is NULL");
  CHECK_ERR(nkrt_tensor_write_2d(t, buf, 16, 0, 8, 16, 2), NKRT_INVALID,
            "write_2d: dst_pitch 8 is smaller than row_bytes 16 (destination rows would overlap)");
  CHECK_ERR(nkrt_tensor_write_2d(t, buf, 16, 0, big, 16, 4), NKRT_INVALID,
            "write_2d: 4 rows of 16 bytes at dst_pitch 9223372036854775807 span more than 2^64 "
            "bytes");
  CHECK_ERR(nkrt_tensor_write_2d(t, buf, big, 0, 16, 16, 4), NKRT_INVALID,
            "write_2d: 4 rows of 16 bytes at src_pitch 9223372036854775807 span more than 2^64 "
            "bytes");
  CHECK_ERR(nkrt_tensor_write_2d(t, buf, 16, 40, 32, 16, 4), NKRT_INVALID,
            "write_2d of 4 rows of 16 bytes (dst_pitch 32) at offset 40 spans bytes [40, 152) "
            "and exceeds the tensor bound of 'x' (128 bytes)");
  CHECK_ERR(nkrt_tensor_write_2d(t, buf, 0, 129, 0, 0, 0), NKRT_INVALID,
            "at offset 129 spans bytes [129, 129) and exceeds the tensor bound of 'x'");
  CHECK_ERR(nkrt_tensor_write_2d(t, buf, 16, UINT64_MAX, 16, 16, 1), NKRT_INVALID,
            "spans bytes [18446744073709551615, 18446744073709551615) and exceeds");
  /* read_2d */
  CHECK_ERR(nkrt_tensor_read_2d(NULL, buf, 16, 0, 16, 16, 2), NKRT_INVALID_HANDLE,
            "read_2d: tensor is NULL");
  CHECK_ERR(nkrt_tensor_read_2d(t, NULL, 16, 0, 16, 16, 2), NKRT_INVALID,
            "read_2d: destination buffer is NULL");
  CHECK_ERR(nkrt_tensor_read_2d(t, buf, 4, 0, 16, 16, 2), NKRT_INVALID,
            "read_2d: dst_pitch 4 is smaller than row_bytes 16 (destination rows would overlap)");
  CHECK_ERR(nkrt_tensor_read_2d(t, buf, big, 0, 16, 16, 4), NKRT_INVALID,
            "read_2d: 4 rows of 16 bytes at dst_pitch 9223372036854775807 span more than 2^64");
  CHECK_ERR(nkrt_tensor_read_2d(t, buf, 16, 0, big, 16, 4), NKRT_INVALID,
            "read_2d: 4 rows of 16 bytes at src_pitch 9223372036854775807 span more than 2^64");
  CHECK_ERR(nkrt_tensor_read_2d(t, buf, 16, 32, 48, 16, 3), NKRT_INVALID,
            "read_2d of 3 rows of 16 bytes (src_pitch 48) at offset 32 spans bytes [32, 144) "
            "and exceeds the tensor bound of 'x' (128 bytes)");
  CHECK_OK(nkrt_tensor_read_2d(t, buf, 16, 0, 0, 16, 8)); /* a source row may repeat */
  /* copy_2d */
  CHECK_ERR(nkrt_tensor_copy_2d(NULL, 0, 16, u, 0, 16, 16, 2), NKRT_INVALID_HANDLE,
            "copy_2d: source tensor is NULL");
  CHECK_ERR(nkrt_tensor_copy_2d(t, 0, 16, NULL, 0, 16, 16, 2), NKRT_INVALID_HANDLE,
            "copy_2d: destination tensor is NULL");
  CHECK_ERR(nkrt_tensor_copy_2d(t, 0, 16, other, 0, 16, 16, 2), NKRT_INVALID,
            "copy_2d: the source and destination tensors belong to different runtimes");
  CHECK_ERR(nkrt_tensor_copy_2d(t, 0, 16, u, 0, 8, 16, 2), NKRT_INVALID,
            "copy_2d destination: dst_pitch 8 is smaller than row_bytes 16");
  CHECK_ERR(nkrt_tensor_copy_2d(t, 0, big, u, 0, 16, 16, 4), NKRT_INVALID,
            "copy_2d source: 4 rows of 16 bytes at src_pitch 9223372036854775807 span more");
  CHECK_ERR(nkrt_tensor_copy_2d(t, 0, 16, u, 0, big, 16, 4), NKRT_INVALID,
            "copy_2d destination: 4 rows of 16 bytes at dst_pitch 9223372036854775807 span");
  CHECK_ERR(nkrt_tensor_copy_2d(t, 64, 32, u, 0, 16, 16, 3), NKRT_INVALID,
            "copy_2d source of 3 rows of 16 bytes (src_pitch 32) at offset 64 spans bytes "
            "[64, 144) and exceeds the tensor bound of 'x' (128 bytes)");
  CHECK_ERR(nkrt_tensor_copy_2d(t, 0, 16, u, 16, 16, 16, 4), NKRT_INVALID,
            "copy_2d destination of 4 rows of 16 bytes (dst_pitch 16) at offset 16 spans bytes "
            "[16, 80) and exceeds the tensor bound of 'y' (64 bytes)");
  CHECK_ERR(nkrt_tensor_copy_2d(t, 0, 16, t, 8, 32, 16, 3), NKRT_INVALID,
            "copy_2d: the source rows [0, 48) of 'x' and the destination rows [8, 88) of 'x' "
            "overlap with different pitches (src_pitch 16, dst_pitch 32)");
  /* memset_2d */
  CHECK_ERR(nkrt_tensor_memset_2d(NULL, 0, 0, 16, 16, 2), NKRT_INVALID_HANDLE,
            "memset_2d: tensor is NULL");
  CHECK_ERR(nkrt_tensor_memset_2d(t, 0, 0, 15, 16, 2), NKRT_INVALID,
            "memset_2d: pitch 15 is smaller than row_bytes 16 (destination rows would overlap)");
  CHECK_ERR(nkrt_tensor_memset_2d(t, 0, 0, big, 16, 4), NKRT_INVALID,
            "memset_2d: 4 rows of 16 bytes at pitch 9223372036854775807 span more than 2^64");
  CHECK_ERR(nkrt_tensor_memset_2d(t, 0, 100, 16, 16, 2), NKRT_INVALID,
            "memset_2d of 2 rows of 16 bytes (pitch 16) at offset 100 spans bytes [100, 132) "
            "and exceeds the tensor bound of 'x' (128 bytes)");
  nkrt_tensor_free(&t);
  nkrt_tensor_free(&u);
  nkrt_tensor_free(&other);
  nkrt_runtime_destroy(rt);
  nkrt_runtime_destroy(rt2);
}
