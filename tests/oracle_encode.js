// oracle_encode.js: encodes files with an independent JavaScript tokenizer, the oracle that
// ljperf's C tokenizer is compared with: llama3-tokenizer-js (npm, MIT; Llama 3 only, its
// default), or with --tokenizer, Tokenizers.js (@huggingface/tokenizers, npm, Apache-2.0: a pure
// JavaScript reading of any tokenizer.json, with the tokenizer_config.json beside it).
//
//   node tests/oracle_encode.js [--package DIR] [--tokenizer FILE] [--time] FILE...
//   node tests/oracle_encode.js [--package DIR] [--tokenizer FILE] --decode ID...   (prints the text as a JSON string)
//
// Prints the ids of each FILE, one per line, files one after another, with no BOS/EOS
// (llama3-tokenizer-js: encode(text, {bos: false, eos: false}); Tokenizers.js:
// encode(text, {add_special_tokens: false})). A file is read as UTF-8 by Node, which replaces
// ill-formed bytes with U+FFFD. Both always turn special-token text in the input (<|eot_id|>,
// <|im_start|> ...) into ids. --time prints MB/s to stderr. DIR defaults to $LJ_CACHE (or
// $LJPERF_CACHE, or <repo>/.cache)/oracle/node_modules/llama3-tokenizer-js, or with --tokenizer
// .../@huggingface/tokenizers. Exits 1 with a message if the package is missing.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const args = process.argv.slice(2);
let pkg = null;
let tokenizerJson = null;
let time = false;
let decode = false;
const files = [];
for (let i = 0; i < args.length; i++) {
    if (args[i] === '--package') pkg = args[++i];
    else if (args[i] === '--tokenizer') tokenizerJson = args[++i];
    else if (args[i] === '--time') time = true;
    else if (args[i] === '--decode') decode = true;
    else files.push(args[i]);
}
if (!pkg) {
    const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
    const cache = process.env.LJ_CACHE || process.env.LJPERF_CACHE || path.join(repo, '.cache');
    pkg = path.join(cache, 'oracle', 'node_modules', tokenizerJson ? '@huggingface/tokenizers' : 'llama3-tokenizer-js');
}
const entry = tokenizerJson ? path.join(pkg, 'dist', 'tokenizers.mjs')
                            : path.join(pkg, 'bundle', 'llama3-tokenizer-with-baked-data.js');
if (!fs.existsSync(entry)) {
    console.error(`oracle_encode.js: ${entry} is missing; run scripts/setup.sh to install the oracle`);
    process.exit(1);
}
let encode, decodeIds;
if (tokenizerJson) {
    const { Tokenizer } = await import(pathToFileURL(entry).href);
    const config = path.join(path.dirname(tokenizerJson), 'tokenizer_config.json');
    const tok = new Tokenizer(JSON.parse(fs.readFileSync(tokenizerJson, 'utf8')),
                              fs.existsSync(config) ? JSON.parse(fs.readFileSync(config, 'utf8')) : {});
    encode = (text) => tok.encode(text, { add_special_tokens: false }).ids;
    decodeIds = (ids) => tok.decode(ids);
} else {
    const { default: tok } = await import(pathToFileURL(entry).href);
    encode = (text) => tok.encode(text, { bos: false, eos: false });
    decodeIds = (ids) => tok.decode(ids);
}

if (decode) {
    console.log(JSON.stringify(decodeIds(files.map(Number))));
    process.exit(0);
}

for (const file of files) {
    const text = fs.readFileSync(file, 'utf8');
    const t0 = performance.now();
    const ids = encode(text);
    const seconds = (performance.now() - t0) / 1000;
    if (time) {
        const bytes = fs.statSync(file).size;
        console.error(`oracle: ${file}: ${bytes} bytes, ${ids.length} tokens, ${seconds.toFixed(3)} s, ` +
                      `${(bytes / 1e6 / seconds).toFixed(2)} MB/s`);
    }
    if (ids.length) process.stdout.write(ids.join('\n') + '\n');
}
