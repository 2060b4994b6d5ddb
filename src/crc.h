/* crc.h — checksums and the directory name hash. */
#ifndef KURA_CRC_H
#define KURA_CRC_H
#include <stddef.h>
#include <stdint.h>

uint32_t crc32c(uint32_t crc, const void *data, size_t len);
/* A keyed 64-bit hash of a name; the key comes from the superblock. */
uint64_t name_hash(const uint64_t key[2], const char *name, size_t len);

#endif
