/*
 * wasmkeep.h: the wasmkeep actor ABI for C, C++ and Zig guests.
 *
 * The imports a wasmkeep host provides and the errno values they return,
 * as declared in ABI.md beside this file (which is the contract; this header
 * only spells it in C). Build a reactor for WASI preview 1, for example with
 * clang and wasi-libc:
 *
 *   clang --target=wasm32-wasi -mexec-model=reactor -O2 -o actor.wasm actor.c
 *
 * and export the handlers under the ABI's names with WASMKEEP_EXPORT:
 *
 *   WASMKEEP_EXPORT("on-alarm")
 *   int32_t on_alarm(int64_t scheduled_ms, int32_t retry_count) { return 0; }
 *
 * Every import returns an errno: 0 on success. Imports never trap on a bad
 * argument, and work only during an event (on-request, on-alarm, on-init);
 * called from _initialize or a constructor they return WASMKEEP_EPERM.
 */
#ifndef WASMKEEP_H
#define WASMKEEP_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Errno values (numbered as in WASI preview 1). */
#define WASMKEEP_ESUCCESS 0
#define WASMKEEP_E2BIG 1   /* a key, value or response is larger than the host accepts */
#define WASMKEEP_EFAULT 21 /* a pointer and length are not inside the guest's memory */
#define WASMKEEP_EINVAL 28 /* an argument is out of range (an alarm time) */
#define WASMKEEP_EIO 29    /* the host's database failed; the event will fail */
#define WASMKEEP_ENOENT 44 /* no alarm is set; no value under that key */
#define WASMKEEP_EPERM 63  /* called outside an event */

/* Limits. */
#define WASMKEEP_MAX_ALARM_MS INT64_C(999999999999999) /* the latest alarm time, Unix ms */
#define WASMKEEP_MAX_KEY_LEN 1024                      /* bytes */
#define WASMKEEP_MAX_VALUE_LEN (1 << 20)               /* bytes */
#define WASMKEEP_MAX_ACTOR_ID_LEN 228                  /* bytes: "tenant/class/name" at its longest */

#define WASMKEEP_IMPORT(module, name) __attribute__((import_module(module), import_name(name)))

/* Exports a function under the ABI's name ("on-alarm", "on-request", "on-init"). */
#define WASMKEEP_EXPORT(name) __attribute__((export_name(name)))

/* wasmkeep:alarm */

/* Sets the alarm to at_ms (Unix ms), replacing any. EINVAL, EPERM, EIO. */
WASMKEEP_IMPORT("wasmkeep:alarm", "set-alarm")
uint32_t wasmkeep_set_alarm(int64_t at_ms);

/* Writes the alarm's time at *out_ms. ENOENT when none is set; EFAULT, EPERM, EIO. */
WASMKEEP_IMPORT("wasmkeep:alarm", "get-alarm")
uint32_t wasmkeep_get_alarm(int64_t *out_ms);

/* Removes the alarm, if any. EPERM, EIO. */
WASMKEEP_IMPORT("wasmkeep:alarm", "clear-alarm")
uint32_t wasmkeep_clear_alarm(void);

/* wasmkeep:actor */

/* Copies min(buf_len, request length) bytes of the request body to buf. EFAULT, EPERM. */
WASMKEEP_IMPORT("wasmkeep:actor", "request-read")
uint32_t wasmkeep_request_read(void *buf, uint32_t buf_len);

/* Appends len bytes to the response. EFAULT, E2BIG, EPERM. */
WASMKEEP_IMPORT("wasmkeep:actor", "response-write")
uint32_t wasmkeep_response_write(const void *buf, uint32_t len);

/*
 * Looks up key; writes the value's full length at *out_len and copies
 * min(buf_len, length) bytes to buf (call again with a larger buffer when
 * *out_len > buf_len). ENOENT when there is no value; E2BIG, EFAULT, EPERM, EIO.
 */
WASMKEEP_IMPORT("wasmkeep:actor", "kv-get")
uint32_t wasmkeep_kv_get(const void *key, uint32_t key_len, void *buf, uint32_t buf_len, uint32_t *out_len);

/* Stores the value under key, replacing any. E2BIG, EFAULT, EPERM, EIO. */
WASMKEEP_IMPORT("wasmkeep:actor", "kv-put")
uint32_t wasmkeep_kv_put(const void *key, uint32_t key_len, const void *val, uint32_t val_len);

/* Removes the value under key (a missing key is not an error). E2BIG, EFAULT, EPERM, EIO. */
WASMKEEP_IMPORT("wasmkeep:actor", "kv-delete")
uint32_t wasmkeep_kv_delete(const void *key, uint32_t key_len);

/*
 * Writes the actor's identity, "tenant/class/name" (the name is everything
 * after the second '/'; at most WASMKEEP_MAX_ACTOR_ID_LEN bytes), to buf and
 * its length at *out_len. E2BIG when buf_len is shorter (the length is
 * written, nothing copied); EFAULT, EPERM.
 */
WASMKEEP_IMPORT("wasmkeep:actor", "actor-id")
uint32_t wasmkeep_actor_id(void *buf, uint32_t buf_len, uint32_t *out_len);

#undef WASMKEEP_IMPORT

#ifdef __cplusplus
}
#endif

#endif /* WASMKEEP_H */
