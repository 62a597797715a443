/* kv_cache.c: the paged KV cache's block pool: free queue, reference counts, the prefix cache's
 * hash table (chained buckets). Contracts in serve/kv_cache.h. */
#include "serve/kv_cache.h"

#include <string.h>
#include <xxhash.h>

void lj_kv_pool_init(lj_kv_pool *p, int num_blocks, int prefix_caching) {
    LJ_ASSERT(num_blocks > 0);
    memset(p, 0, sizeof *p);
    p->num_blocks = num_blocks;
    p->prefix_caching = prefix_caching;
    p->blocks = lj_calloc((size_t)num_blocks, sizeof *p->blocks);
    p->tokens = lj_malloc((size_t)num_blocks * LJ_KV_BLOCK_SIZE * sizeof(int32_t));
    p->num_buckets = 1;
    while (p->num_buckets < 2 * num_blocks) p->num_buckets *= 2;
    p->buckets = lj_malloc((size_t)p->num_buckets * sizeof(int32_t));
    for (int i = 0; i < p->num_buckets; i++) p->buckets[i] = -1;
    for (int b = 0; b < num_blocks; b++) {
        p->blocks[b].prev = b - 1;
        p->blocks[b].next = b + 1 < num_blocks ? b + 1 : -1;
        p->blocks[b].bucket_next = -1;
    }
    p->free_head = 0;
    p->free_tail = num_blocks - 1;
    p->num_free = num_blocks;
}

void lj_kv_pool_free(lj_kv_pool *p) {
    free(p->blocks);
    free(p->tokens);
    free(p->buckets);
    memset(p, 0, sizeof *p);
}

uint64_t lj_kv_block_hash(uint64_t parent, const int32_t *ids, uint64_t salt) {
    uint64_t buf[2 + LJ_KV_BLOCK_SIZE / 2];
    buf[0] = parent;
    buf[1] = salt;
    memcpy(buf + 2, ids, LJ_KV_BLOCK_SIZE * sizeof(int32_t));
    return XXH3_64bits(buf, sizeof buf);
}

static void queue_remove(lj_kv_pool *p, int32_t b) {
    lj_kv_block *k = &p->blocks[b];
    if (k->prev >= 0) p->blocks[k->prev].next = k->next;
    else p->free_head = k->next;
    if (k->next >= 0) p->blocks[k->next].prev = k->prev;
    else p->free_tail = k->prev;
    k->prev = k->next = -1;
    p->num_free--;
}

static void queue_push_tail(lj_kv_pool *p, int32_t b) {
    lj_kv_block *k = &p->blocks[b];
    k->next = -1;
    k->prev = p->free_tail;
    if (p->free_tail >= 0) p->blocks[p->free_tail].next = b;
    else p->free_head = b;
    p->free_tail = b;
    p->num_free++;
}

static int bucket_of(const lj_kv_pool *p, uint64_t h) { return (int)(h & (uint64_t)(p->num_buckets - 1)); }

static void unregister(lj_kv_pool *p, int32_t b) {
    lj_kv_block *k = &p->blocks[b];
    if (!k->hashed) return;
    int32_t *link = &p->buckets[bucket_of(p, k->hash)];
    while (*link != b) link = &p->blocks[*link].bucket_next;
    *link = k->bucket_next;
    k->bucket_next = -1;
    k->hashed = 0;
}

int32_t lj_kv_pool_alloc(lj_kv_pool *p) {
    const int32_t b = p->free_head;
    if (b < 0) return -1;
    queue_remove(p, b);
    unregister(p, b);
    p->blocks[b].ref = 1;
    return b;
}

void lj_kv_pool_release(lj_kv_pool *p, int32_t b) {
    lj_kv_block *k = &p->blocks[b];
    LJ_ASSERT(k->ref > 0, "block %d released twice", b);
    if (--k->ref == 0) {
        if (!p->prefix_caching) unregister(p, b);
        queue_push_tail(p, b);
    }
}

void lj_kv_pool_release_all(lj_kv_pool *p, const int32_t *table, int n) {
    for (int i = n - 1; i >= 0; i--) lj_kv_pool_release(p, table[i]);
}

/* The cached block of this hash, parent and tokens, or -1. */
static int32_t find(const lj_kv_pool *p, uint64_t h, uint64_t parent, const int32_t *ids) {
    for (int32_t b = p->buckets[bucket_of(p, h)]; b >= 0; b = p->blocks[b].bucket_next) {
        const lj_kv_block *k = &p->blocks[b];
        if (k->hash == h && k->parent == parent &&
            memcmp(p->tokens + (size_t)b * LJ_KV_BLOCK_SIZE, ids, LJ_KV_BLOCK_SIZE * sizeof(int32_t)) == 0)
            return b;
    }
    return -1;
}

int lj_kv_pool_lookup(lj_kv_pool *p, const int32_t *ids, int n, uint64_t salt, int max_blocks, int32_t *table,
                      uint64_t *hashes) {
    if (!p->prefix_caching) return 0;
    p->queries += n;
    uint64_t parent = 0;
    int got = 0;
    while (got < max_blocks && (got + 1) * LJ_KV_BLOCK_SIZE <= n) {
        const int32_t *blk = ids + (size_t)got * LJ_KV_BLOCK_SIZE;
        const uint64_t h = lj_kv_block_hash(parent, blk, salt);
        const int32_t b = find(p, h, parent, blk);
        if (b < 0) break;
        if (p->blocks[b].ref++ == 0) queue_remove(p, b);
        table[got] = b;
        hashes[got] = h;
        parent = h;
        got++;
    }
    p->hits += (int64_t)got * LJ_KV_BLOCK_SIZE;
    return got;
}

uint64_t lj_kv_pool_register(lj_kv_pool *p, int32_t b, uint64_t parent, const int32_t *ids, uint64_t salt) {
    const uint64_t h = lj_kv_block_hash(parent, ids, salt);
    if (!p->prefix_caching) return h;
    lj_kv_block *k = &p->blocks[b];
    if (k->hashed || find(p, h, parent, ids) >= 0) return h;
    k->hash = h;
    k->parent = parent;
    k->hashed = 1;
    memcpy(p->tokens + (size_t)b * LJ_KV_BLOCK_SIZE, ids, LJ_KV_BLOCK_SIZE * sizeof(int32_t));
    const int bk = bucket_of(p, h);
    k->bucket_next = p->buckets[bk];
    p->buckets[bk] = b;
    return h;
}

void lj_kv_pool_reset_prefix_cache(lj_kv_pool *p) {
    for (int i = 0; i < p->num_buckets; i++) p->buckets[i] = -1;
    for (int b = 0; b < p->num_blocks; b++) p->blocks[b].hashed = 0, p->blocks[b].bucket_next = -1;
}
