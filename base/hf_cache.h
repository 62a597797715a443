/* hf_cache.h: finding a model of the Hugging Face hub in the local cache, offline, as
 * huggingface_hub lays it out (its docs: "Manage the cache" and "Environment variables"):
 *
 *   CACHE/models--ORG--NAME/refs/main            the commit hash that "main" points to
 *   CACHE/models--ORG--NAME/snapshots/HASH/...   the files of that revision (links into blobs/)
 *   CACHE/models--ORG--NAME/blobs/...            the file contents
 *
 * CACHE is $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE (its older name), else $HF_HOME/hub, else
 * $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (HOME from the environment).
 * Nothing is downloaded: a model is in the cache or it is not. */
#ifndef LJ_HF_CACHE_H
#define LJ_HF_CACHE_H

#include "base/base.h"

/* 1 if `s` has the form of a hub model id with an owner, ORG/NAME: two non-empty parts of
 * letters, digits, '-', '_' and '.', neither starting or ending with '-' or '.', no "--" or "..",
 * at most 96 bytes (huggingface_hub's validate_repo_id); 0 otherwise ("./x", "a/b/c", "x.json"
 * are not). */
int lj_hf_repo_id_like(const char *s);

/* The cache directory above into buf (buflen bytes). Errors: LJ_ERR_ARG when it does not fit;
 * LJ_ERR_IO when neither the variables nor HOME are set. */
lj_status lj_hf_cache_dir(char *buf, size_t buflen);

/* The snapshot directory of `repo_id` (ORG/NAME) into buf: the revision refs/main names, or the
 * only snapshot when there is no refs/main. `flag` names the argument in messages.
 * Errors (LJ_ERR_IO, each naming the flag, the id and the directory looked at): the model is not
 * in the cache ("download it first"), refs/main names a snapshot that is missing, several
 * snapshots and no refs/main; LJ_ERR_ARG for a path longer than buflen. */
lj_status lj_hf_cache_snapshot(const char *repo_id, const char *flag, char *buf, size_t buflen);

#endif
