/* chat_template.h: renders a model's chat template (the Jinja source in tokenizer_config.json's
 * chat_template) over a conversation, as transformers' apply_chat_template does: a Jinja2
 * environment with trim_blocks and lstrip_blocks (transformers/utils/chat_template_utils.py).
 * A subset of Jinja2 (jinja.palletsprojects.com, "Template Designer Documentation"): text,
 * {{ }} {% %} {# #} with '-' whitespace control; if/elif/else, for (loop.index, index0, first,
 * last, length; else), set (names and namespace attributes), namespace(); literals, names,
 * attributes, subscripts and slices, calls, the operators of Python's precedence (or, and, not,
 * in, not in, is, comparisons, + - ~ * / // %), conditional expressions; the filters trim, length,
 * tojson, string, lower, upper, default, first, last, join, items, list, int; the tests defined,
 * undefined, none, string, number, mapping, iterable, sequence, true, false, boolean, eq; the
 * string methods startswith, endswith, split, strip, lstrip, rstrip, replace, upper, lower,
 * title; dict methods get, items, keys, values; raise_exception() and strftime_now(). That
 * covers the templates of Llama 3.x and Qwen3; anything else is an error naming what is
 * missing, never a wrong rendering. */
#ifndef LJ_SERVE_CHAT_TEMPLATE_H
#define LJ_SERVE_CHAT_TEMPLATE_H

#include <cjson/cJSON.h>

#include "base/base.h"

/* Renders `tmpl` with the variables of `vars` (a JSON object: messages, add_generation_prompt,
 * bos_token, eos_token, and the chat_template_kwargs such as enable_thinking; not modified) into
 * *out (free() it). Errors: LJ_ERR_FORMAT for a template outside the subset or that raises
 * (raise_exception), the message naming the construct and its offset in the template. */
lj_status lj_chat_template_render(const char *tmpl, const cJSON *vars, char **out);

#endif
