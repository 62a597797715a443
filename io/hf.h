/* hf.h: Hugging Face checkpoint directories of the families config/config.h builds (Llama,
 * Qwen2/Qwen2.5, Qwen3) (config.json + model.safetensors, or shards
 * model-0000K-of-0000N.safetensors with model.safetensors.index.json): export and import of
 * the flat parameter buffer.
 *
 * Format: docs/reference.md ("safetensors"; the index is {"metadata": {"total_size":
 * bytes}, "weight_map": {name: file}}, as transformers' save_pretrained writes it). Tensor
 * names, shapes and order are those of config/config.h's parameter layout (HF names, [out, in]
 * matrices); q_proj/k_proj rows are in HF's half-split RoPE order, so nothing is permuted.
 * A tied model (tie_word_embeddings) has no lm_head.weight tensor.
 */
#ifndef LJ_HF_H
#define LJ_HF_H

#include "base/base.h"
#include "config/config.h"
#include "io/safetensors.h"

/* The export's checksums, beside the weights (transformers reads no file of this name):
 * {"format": "ljperf-checksums", "version": 1, "algorithm": "xxh3_64", "files": {FILE: {TENSOR:
 * 16 hex digits of the XXH3-64 of its bytes as stored}}}. lj_hf_import verifies every tensor it
 * reads against it when the directory has one. */
#define LJ_HF_CHECKSUMS_FILE "model.safetensors.checksums.json"

/* transformers' default max_shard_size for save_pretrained ("5GB"). */
#define LJ_HF_DEFAULT_SHARD_BYTES 5000000000ull

/* Exports `params` (the flat fp32 buffer of config/config.h's layout, lj_config_num_params(cfg)
 * elements) to the directory `dir`: config.json (lj_config_save, torch_dtype "bfloat16" or
 * "float32") and the weights in `dtype` (LJ_DTYPE_F32, or LJ_DTYPE_BF16 rounded to nearest
 * even by lj_f32_to_bf16), with metadata {"format": "pt"}. When the weights' total bytes
 * exceed `max_shard_bytes` (0: never shard) they are split, in layout order, into
 * model-0000K-of-0000N.safetensors files of at most that size (a larger tensor gets a shard
 * of its own) plus model.safetensors.index.json.
 * Atomic: everything is written to DIR.tmp.PID and renamed to `dir`; an existing `dir` is
 * replaced in one step (lj_dir_install) and its old contents deleted. An existing `dir`
 * that is not empty and holds no config.json or *.safetensors is refused (it may be the
 * user's other data). Errors: LJ_ERR_ARG (bad dtype, a refused dir), LJ_ERR_IO naming the
 * path; on error nothing that existed before has changed. */
lj_status lj_hf_export(const char *dir, const lj_model_config *cfg, const float *params, lj_dtype dtype,
                       uint64_t max_shard_bytes);

/* As lj_hf_export, but writes the files straight into the existing directory `dir` (each file
 * still atomically, but with no directory swap), for a caller that seals the directory itself,
 * e.g. an lj_ckpt_extra_fn of lj_ckpt_save_ex. Stale shard files already in `dir` are not
 * removed: give it an empty directory. */
lj_status lj_hf_export_into(const char *dir, const lj_model_config *cfg, const float *params, lj_dtype dtype,
                            uint64_t max_shard_bytes);

/* As lj_hf_export_into, but the weights come from `read(ctx, offset, n, dst)` (n fp32 values at
 * flat offset `offset` of the layout), tensor by tensor in chunks of LJ_ST_STREAM_CHUNK values,
 * on the calling thread while a writer thread converts and writes the chunk before: the host
 * memory it takes is two chunks, whatever the model's size. Errors: those of `read`
 * (prefixed with the file being written), and as lj_hf_export_into. */
lj_status lj_hf_export_stream_into(const char *dir, const lj_model_config *cfg, lj_st_read_f32_fn read, void *ctx,
                                   lj_dtype dtype, uint64_t max_shard_bytes);

/* Imports a HF checkpoint of `cfg`'s family into `params` (flat fp32, lj_config_num_params(cfg)
 * elements). `dir` is a directory holding model.safetensors.index.json (sharded) or
 * model.safetensors, or the path of one .safetensors file. Tensors may be F32, BF16 or F16
 * (widened to fp32 exactly). Every tensor of the layout must be present with exactly the
 * layout's shape; lm_head.weight in a tied model is accepted and ignored if its shape is
 * [V, d]; the rotary_emb.inv_freq buffers of old checkpoints are ignored; any other tensor is
 * an error naming it (it would be dropped). `params` is written only after every check has
 * passed.
 * Errors: LJ_ERR_IO / LJ_ERR_FORMAT naming the file and the tensor, e.g.
 * "ckpt/model.safetensors: tensor 'model.layers.0.mlp.up_proj.weight' has shape [64, 32],
 * the config needs [192, 64]", "...: tensor 'model.norm.weight' is missing" (a Qwen2 config
 * on a checkpoint without biases: "...: tensor 'model.layers.0.self_attn.q_proj.bias' is
 * missing"), "...: tensor 'model.layers.0.self_attn.q_proj.bias' is not part of this model". */
lj_status lj_hf_import(const char *dir, const lj_model_config *cfg, float *params);

/* One tensor lj_hf_import_tensors reads: its HF name, the shape it must have (param's ndim and
 * shape; with `flatten`, a tensor of more dimensions is accepted when its first dimension is
 * shape[0] and the rest multiply to shape[1], e.g. a Conv3d weight read as a matrix), and where
 * its param->numel fp32 values go. `optional`: absent is fine (and present: read only when
 * dst is not NULL; a tied lm_head.weight). `check_finite`: a NaN or infinite value read into dst
 * is an error naming the file, the tensor and the element (checked as each tensor is read). */
typedef struct {
    const char *name;
    const lj_param_info *param;
    float *dst;
    int flatten;
    int optional;
    int check_finite;
} lj_hf_tensor;

/* Imports the tensors `want[n]` from a checkpoint (`dir` as lj_hf_import). Every other tensor
 * of the checkpoint is an error naming it, except those ending in rotary_emb.inv_freq; a
 * tensor of the wrong shape or dtype is an error naming the file, the tensor and both shapes.
 * The destinations are written only after every check has passed. */
lj_status lj_hf_import_tensors(const char *dir, const lj_hf_tensor *want, int n);

/* Loads DIR/config.json with lj_config_load (errors name the file and the field). */
lj_status lj_hf_load_config(const char *dir, lj_model_config *cfg);

#endif
