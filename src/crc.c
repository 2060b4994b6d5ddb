/* crc.c — crc32c (hardware instruction when present) and a keyed name hash. */
#include <string.h>
#include "crc.h"

static uint32_t table[256];
static int have_sse42 = -1;

static void init_table(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		table[i] = c;
	}
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const unsigned char *p, size_t len)
{
	uint64_t c = crc;
	for (; len >= 8; len -= 8, p += 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		c = __builtin_ia32_crc32di(c, w);
	}
	uint32_t c32 = (uint32_t)c;
	for (; len; len--)
		c32 = __builtin_ia32_crc32qi(c32, *p++);
	return c32;
}

uint32_t crc32c(uint32_t crc, const void *data, size_t len)
{
	const unsigned char *p = data;
	if (have_sse42 < 0) {
		__builtin_cpu_init();
		init_table();
		__atomic_store_n(&have_sse42, __builtin_cpu_supports("sse4.2") ? 1 : 0, __ATOMIC_RELEASE);
	}
	crc = ~crc;
	if (have_sse42)
		crc = crc_hw(crc, p, len);
	else
		while (len--)
			crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

static inline uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

/* Multiply-mix over 8-byte words, keyed at both ends.  Not a MAC, but the key
 * is random per pool, which is what keeps crafted collisions out. */
uint64_t name_hash(const uint64_t key[2], const char *name, size_t len)
{
	uint64_t h = key[0] ^ (len * 0x9e3779b97f4a7c15ull);
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		uint64_t w;
		memcpy(&w, name + i, 8);
		h = mix(h ^ w) + key[1];
	}
	/* The tail as memcpy into a zeroed word would leave it (little
	 * endian), without a call per name. */
	uint64_t w = 0;
	for (size_t k = 0; k < len - i; k++)
		w |= (uint64_t)(uint8_t)name[i + k] << (8 * k);
	h = mix(h ^ w ^ ((uint64_t)(len - i) << 56));
	return mix(h ^ key[1]);
}
