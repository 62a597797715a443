// oracle_encode.js: encodes files with the independent JavaScript Llama 3 tokenizer
// llama3-tokenizer-js (npm, MIT), the oracle that ljperf's C tokenizer is compared with.
//
//   node tests/oracle_encode.js [--package DIR] [--time] FILE...
//   node tests/oracle_encode.js [--package DIR] --decode ID...   (prints the text as a JSON string)
//
// Prints the ids of each FILE, one per line, files one after another, with no BOS/EOS (the
// package adds both unless told not to: encode(text, {bos: false, eos: false})). A file is read
// as UTF-8 by Node, which replaces ill-formed bytes with U+FFFD. The package always turns the
// Llama 3 special-token strings (<|eot_id|> ...) in the text into their ids. --time prints
// MB/s to stderr. DIR defaults to $LJ_CACHE (or $LJPERF_CACHE, or <repo>/.cache)
// /oracle/node_modules/llama3-tokenizer-js. Exits 1 with a message if the package is missing.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const args = process.argv.slice(2);
let pkg = null;
let time = false;
let decode = false;
const files = [];
for (let i = 0; i < args.length; i++) {
    if (args[i] === '--package') pkg = args[++i];
    else if (args[i] === '--time') time = true;
    else if (args[i] === '--decode') decode = true;
    else files.push(args[i]);
}
if (!pkg) {
    const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
    const cache = process.env.LJ_CACHE || process.env.LJPERF_CACHE || path.join(repo, '.cache');
    pkg = path.join(cache, 'oracle', 'node_modules', 'llama3-tokenizer-js');
}
const entry = path.join(pkg, 'bundle', 'llama3-tokenizer-with-baked-data.js');
if (!fs.existsSync(entry)) {
    console.error(`oracle_encode.js: ${entry} is missing; run scripts/setup.sh to install llama3-tokenizer-js`);
    process.exit(1);
}
const { default: tokenizer } = await import(pathToFileURL(entry).href);

if (decode) {
    console.log(JSON.stringify(tokenizer.decode(files.map(Number))));
    process.exit(0);
}

for (const file of files) {
    const text = fs.readFileSync(file, 'utf8');
    const t0 = performance.now();
    const ids = tokenizer.encode(text, { bos: false, eos: false });
    const seconds = (performance.now() - t0) / 1000;
    if (time) {
        const bytes = fs.statSync(file).size;
        console.error(`oracle: ${file}: ${bytes} bytes, ${ids.length} tokens, ${seconds.toFixed(3)} s, ` +
                      `${(bytes / 1e6 / seconds).toFixed(2)} MB/s`);
    }
    if (ids.length) process.stdout.write(ids.join('\n') + '\n');
}
