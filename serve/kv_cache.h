/* kv_cache.h: the paged KV cache's block manager (host bookkeeping; the cache memory itself is
 * serve/forward.h's): a pool of blocks of LJ_KV_BLOCK_SIZE token positions, reference counts, a
 * free queue, and automatic prefix caching. Source: vLLM's KVCacheManager and BlockPool
 * (docs/design/prefix_caching.md):
 *   - a full block's hash is hash(parent block's hash, its token ids, the request's cache_salt);
 *     only full blocks are cached, found by that hash (the chain makes it a hash of the whole
 *     prefix), and a hit is checked against the stored token ids and parent hash;
 *   - blocks with no reference wait in the free queue (a doubly linked list, O(1) removal);
 *     allocation takes the head (the least recently freed: LRU), dropping its cached hash;
 *   - a finished sequence frees its blocks last block first, so its tail is evicted first.
 * Not thread-safe: the engine thread owns it. */
#ifndef LJ_SERVE_KV_CACHE_H
#define LJ_SERVE_KV_CACHE_H

#include "base/base.h"

#define LJ_KV_BLOCK_SIZE 16 /* token positions per block (vLLM's default block_size) */

typedef struct {
    int32_t ref;          /* sequences holding it */
    int32_t prev, next;   /* free queue links (-1: none); in the queue iff ref == 0 */
    int32_t bucket_next;  /* next block in its hash bucket, -1: none */
    uint8_t hashed;       /* registered in the prefix cache under `hash` */
    uint64_t hash, parent;
} lj_kv_block;

typedef struct {
    int num_blocks;
    lj_kv_block *blocks;
    int32_t *tokens;       /* [num_blocks, LJ_KV_BLOCK_SIZE]: the ids of a hashed block */
    int32_t free_head, free_tail;
    int num_free;
    int32_t *buckets;      /* [num_buckets] first block, -1: empty */
    int num_buckets;
    int prefix_caching;    /* 0: nothing is registered or looked up */
    /* counters (tokens): prefix-cache lookups and hits, since start */
    int64_t queries, hits;
} lj_kv_pool;

/* A pool of num_blocks blocks (> 0), all free. */
void lj_kv_pool_init(lj_kv_pool *p, int num_blocks, int prefix_caching);
void lj_kv_pool_free(lj_kv_pool *p);

/* Blocks in use (ref > 0). */
static inline int lj_kv_pool_used(const lj_kv_pool *p) { return p->num_blocks - p->num_free; }

/* The hash of a full block: its parent's hash (0 for the first block), its LJ_KV_BLOCK_SIZE ids
 * and the salt (0: none). XXH3-64. */
uint64_t lj_kv_block_hash(uint64_t parent, const int32_t *ids, uint64_t salt);

/* Takes a free block (ref 1), evicting its cached hash; -1 when none is free. */
int32_t lj_kv_pool_alloc(lj_kv_pool *p);

/* Drops one reference to block b; at 0 it joins the tail of the free queue (still cached). */
void lj_kv_pool_release(lj_kv_pool *p, int32_t b);

/* Frees a sequence's blocks table[0..n), last first. */
void lj_kv_pool_release_all(lj_kv_pool *p, const int32_t *table, int n);

/* The longest cached prefix of ids[0..n) in whole blocks, at most max_blocks: writes the block
 * ids into table[] (each gets one more reference, leaving the free queue if it was there) and
 * the chain's hashes into hashes[]; returns the number of blocks. Counts n tokens as queried and
 * the hit blocks' tokens as hits. */
int lj_kv_pool_lookup(lj_kv_pool *p, const int32_t *ids, int n, uint64_t salt, int max_blocks, int32_t *table,
                      uint64_t *hashes);

/* Registers block b, now full of ids[0..LJ_KV_BLOCK_SIZE) after the parent hash, under its hash
 * (a block already cached under the same hash and tokens stays the one found; b is then left
 * unregistered). Returns the hash. */
uint64_t lj_kv_pool_register(lj_kv_pool *p, int32_t b, uint64_t parent, const int32_t *ids, uint64_t salt);

/* Forgets every cached hash (vLLM's reset_prefix_cache): no later lookup hits a block computed
 * before; the blocks and their references stay as they are. */
void lj_kv_pool_reset_prefix_cache(lj_kv_pool *p);

#endif
