/* test_util.h: what several cmocka tests share: a small Llama configuration (vocabulary 97,
 * d 32, I 48, 4 query / 2 KV heads of 8, GQA) that builds and runs in milliseconds. */
#ifndef LJ_TEST_UTIL_H
#define LJ_TEST_UTIL_H

#include "model/config.h"

static inline lj_model_config lj_test_small_config(int layers, int tie) {
    lj_model_config c;
    if (lj_config_preset("llama3-nano", &c) != LJ_OK) abort();
    c.vocab_size = 97;
    c.hidden_size = 32;
    c.intermediate_size = 48;
    c.num_hidden_layers = layers;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 8;
    c.max_position_embeddings = 4096;
    c.tie_word_embeddings = tie;
    c.bos_token_id = 1;
    c.eos_token_id = 2;
    return c;
}

#endif
