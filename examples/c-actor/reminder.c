/*
 * A reminder actor in C (see abi/wasmkeep.h). Requests (text):
 *
 *   in <ms>   set the alarm for now + ms
 *   get       the number of reminders that fired, as decimal text
 *
 * Its on-alarm counts the firing in its key/value table; the count fails
 * to update (and the alarm is retried) if the host's database fails.
 *
 *   clang --target=wasm32-wasi -mexec-model=reactor -O2 -Wl,--strip-all -I../../abi -o reminder.wasm reminder.c
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wasmkeep.h"

static const char key[] = "fired";

/* fired reads the count; 0 when none is stored. */
static uint32_t fired(long long *n) {
	char buf[32];
	uint32_t len = 0;
	uint32_t e = wasmkeep_kv_get(key, sizeof key - 1, buf, sizeof buf - 1, &len);
	if (e == WASMKEEP_ENOENT) {
		*n = 0;
		return 0;
	}
	if (e != 0) return e;
	if (len > sizeof buf - 1) return WASMKEEP_EINVAL;
	buf[len] = 0;
	*n = atoll(buf);
	return 0;
}

/* now_ms reads the host's clock (WASI's realtime clock). */
static int64_t now_ms(void) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

WASMKEEP_EXPORT("on-request")
int32_t on_request(int32_t req_len) {
	char req[64];
	char out[32];
	if (req_len < 0 || req_len >= (int32_t)sizeof req) return 1;
	if (wasmkeep_request_read(req, (uint32_t)req_len) != 0) return 1;
	req[req_len] = 0;
	if (strncmp(req, "in ", 3) == 0) {
		long long ms = atoll(req + 3);
		if (ms <= 0) return 1;
		if (wasmkeep_set_alarm(now_ms() + ms) != 0) return 1;
		return wasmkeep_response_write("ok", 2) != 0;
	}
	if (strcmp(req, "get") == 0) {
		long long n;
		if (fired(&n) != 0) return 1;
		int len = snprintf(out, sizeof out, "%lld", n);
		return wasmkeep_response_write(out, (uint32_t)len) != 0;
	}
	return 1;
}

WASMKEEP_EXPORT("on-alarm")
int32_t on_alarm(int64_t scheduled_ms, int32_t retry_count) {
	(void)scheduled_ms;
	(void)retry_count;
	long long n;
	char buf[32];
	if (fired(&n) != 0) return 1;
	int len = snprintf(buf, sizeof buf, "%lld", n + 1);
	return wasmkeep_kv_put(key, sizeof key - 1, buf, (uint32_t)len) != 0;
}
