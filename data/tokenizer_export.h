/* tokenizer_export.h: the tokenizer files of a Hugging Face model directory, so that an
 * exported checkpoint is complete: transformers' AutoTokenizer.from_pretrained(dir) and
 * pipeline("text-generation", model=dir) load it with no other file. Sources: the files that
 * transformers' PreTrainedTokenizerFast.save_pretrained and GenerationConfig.save_pretrained
 * write (tokenizer.json, tokenizer_config.json, special_tokens_map.json,
 * generation_config.json). */
#ifndef LJ_TOKENIZER_EXPORT_H
#define LJ_TOKENIZER_EXPORT_H

#include "config/config.h"

/* Writes into the existing directory `dir`, each file atomically (lj_file_write_atomic):
 *   tokenizer.json           a byte copy of `tokenizer_path`, except when the tokenizer starts
 *                            sequences with BOS (lj_tokenizer_adds_bos: Llama 3, as Meta's
 *                            tokenizer.json and ljperf's generate do; not Qwen) and its
 *                            post_processor does not add it: then the post_processor becomes a
 *                            Sequence of the old one and a TemplateProcessing that prepends BOS,
 *                            in the old one's place, every other field as it was;
 *   tokenizer_config.json    a byte copy of the tokenizer_config.json beside `tokenizer_path`
 *                            (tokenizer_class, chat template and added-token table kept), else
 *                            one derived from the tokenizer: the tokenizer_class its published
 *                            files name (Qwen2Tokenizer for Qwen2's pre-tokenizer,
 *                            lj_tokenizer_is_qwen2, with Qwen's fields; else
 *                            PreTrainedTokenizerFast), bos_token, eos_token, model_max_length =
 *                            cfg->max_position_embeddings;
 *   special_tokens_map.json  the copied tokenizer_config.json's bos/eos/pad/unk tokens, else
 *                            {"bos_token": ..., "eos_token": ...}, the tokenizer's BOS/EOS text;
 *   generation_config.json   {"bos_token_id", "eos_token_id", "transformers_version"}: the
 *                            tokenizer's ids (as lj_tokenizer_load finds them), else cfg's;
 *                            LJ_HF_TRANSFORMERS_VERSION (config/config.h).
 * Errors: as lj_tokenizer_load (naming the tokenizer file), LJ_ERR_ARG when the tokenizer's
 * vocabulary (lj_tokenizer_vocab_size) is larger than cfg->vocab_size, LJ_ERR_IO naming the
 * file that could not be written. */
lj_status lj_tokenizer_export_hf(const char *tokenizer_path, const char *dir, const lj_model_config *cfg);

/* Checks, before a run spends time, that `tokenizer_path` loads and fits a model of
 * cfg->vocab_size ids. `flag` names its source in the message. Errors: as lj_tokenizer_export_hf. */
lj_status lj_tokenizer_check_export(const char *tokenizer_path, const lj_model_config *cfg, const char *flag);

#endif
