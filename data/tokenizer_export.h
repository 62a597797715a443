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
 *   tokenizer.json           `tokenizer_path` as it is, except that its post_processor prepends
 *                            the BOS token when the tokenizer starts sequences with it
 *                            (lj_tokenizer_adds_bos: Llama 3, as Meta's tokenizer.json and
 *                            ljperf's generate do; not Qwen) and the file does not already;
 *   tokenizer_config.json    a byte copy of the tokenizer_config.json beside `tokenizer_path`
 *                            (chat template and added-token table kept), else one derived from
 *                            the tokenizer: tokenizer_class PreTrainedTokenizerFast, bos_token,
 *                            eos_token, model_max_length = cfg->max_position_embeddings;
 *   special_tokens_map.json  the copied tokenizer_config.json's bos/eos/pad/unk tokens, else
 *                            {"bos_token": ..., "eos_token": ...}, the tokenizer's BOS/EOS text;
 *   generation_config.json   {"bos_token_id", "eos_token_id"}: the tokenizer's ids (as
 *                            lj_tokenizer_load finds them), else cfg's.
 * Errors: as lj_tokenizer_load (naming the tokenizer file), LJ_ERR_ARG when the tokenizer's
 * vocabulary (lj_tokenizer_vocab_size) is larger than cfg->vocab_size, LJ_ERR_IO naming the
 * file that could not be written. */
lj_status lj_tokenizer_export_hf(const char *tokenizer_path, const char *dir, const lj_model_config *cfg);

/* Checks, before a run spends time, that `tokenizer_path` loads and fits a model of
 * cfg->vocab_size ids. `flag` names its source in the message. Errors: as lj_tokenizer_export_hf. */
lj_status lj_tokenizer_check_export(const char *tokenizer_path, const lj_model_config *cfg, const char *flag);

#endif
