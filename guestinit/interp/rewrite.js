// cellvm's rewrite of a JavaScript cell for driver.js (PROTOCOL.md's Node
// section): top-level declarations become globals, import( the driver's,
// and a cell with top-level await an async function. Node 18's standard
// library only.
'use strict';

const vm = require('vm');

const jsonStringify = JSON.stringify;

// A cell runs as a vm.Script in the main context, whose completion value
// (that of the last expression statement) is the result, as in Node's
// REPL. Top-level let, const and class are rewritten to var first, so
// that they persist as globals and a cell can be run again without
// "Identifier 'x' has already been declared". A cell with top-level await
// runs in an async function instead: its last expression statement is
// returned, and its top-level declarations are copied to the globals when
// it ends. This needs a scanner of JavaScript's tokens (strings,
// templates, comments, regular expressions, brackets), not a parser.
const KEYWORDS_BEFORE_REGEX = new Set(['return', 'typeof', 'instanceof', 'in', 'of', 'new', 'delete', 'void',
  'throw', 'case', 'do', 'else', 'yield', 'await']);

function scan(src) {
  const toks = [];
  const stack = []; // open brackets; '${' for a template's substitution
  let i = 0;
  let nl = false;
  const n = src.length;
  const push = (type, start, end) => {
    toks.push({ type, value: src.slice(start, end), start, end, depth: stack.length, nl });
    nl = false;
  };
  const regexAllowed = () => {
    const t = toks[toks.length - 1];
    if (!t) return true;
    if (t.type === 'name') return KEYWORDS_BEFORE_REGEX.has(t.value);
    if (t.type === 'punct') return !/^[)\]}]$/.test(t.value) && t.value !== '++' && t.value !== '--';
    return false;
  };
  const template = (start) => { // i is after '`' or '}'; reads to '`' or '${'
    while (i < n) {
      const c = src[i];
      if (c === '\\') { i += 2; continue; }
      if (c === '`') { i++; push('tmpl', start, i); return; }
      if (c === '$' && src[i + 1] === '{') { i += 2; push('tmpl', start, i); stack.push('${'); return; }
      i++;
    }
    push('tmpl', start, n);
  };
  while (i < n) {
    const c = src[i];
    if (c === '\n' || c === '\r' || c === '\u2028' || c === '\u2029') { nl = true; i++; continue; }
    if (c === ' ' || c === '\t' || c === '\v' || c === '\f' || c === '\ufeff' || c === '\u00a0') { i++; continue; }
    const start = i;
    if (c === '/' && src[i + 1] === '/') { while (i < n && src[i] !== '\n') i++; continue; }
    if (c === '/' && src[i + 1] === '*') {
      const e = src.indexOf('*/', i + 2);
      const end = e < 0 ? n : e + 2;
      if (src.slice(i, end).includes('\n')) nl = true;
      i = end;
      continue;
    }
    if (c === '#' && i === 0 && src[1] === '!') { while (i < n && src[i] !== '\n') i++; continue; }
    if (c === '"' || c === "'") {
      i++;
      while (i < n && src[i] !== c && src[i] !== '\n') i += src[i] === '\\' ? 2 : 1;
      i++;
      push('str', start, Math.min(i, n));
      continue;
    }
    if (c === '`') { i++; template(start); continue; }
    if (c === '}' && stack[stack.length - 1] === '${') { stack.pop(); i++; template(start); continue; }
    if (/[A-Za-z_$\u0080-\uffff\\]/.test(c)) {
      while (i < n && /[\w$\u0080-\uffff\\]/.test(src[i])) i++;
      push('name', start, i);
      continue;
    }
    if (/[0-9]/.test(c) || (c === '.' && /[0-9]/.test(src[i + 1] || ''))) {
      while (i < n && /[\w.]/.test(src[i])) i++;
      push('num', start, i);
      continue;
    }
    if (c === '/' && regexAllowed()) {
      i++;
      let cls = false;
      while (i < n && src[i] !== '\n') {
        const d = src[i];
        if (d === '\\') { i += 2; continue; }
        if (d === '[') cls = true;
        else if (d === ']') cls = false;
        else if (d === '/' && !cls) break;
        i++;
      }
      i++;
      while (i < n && /\w/.test(src[i])) i++;
      push('regex', start, Math.min(i, n));
      continue;
    }
    if (c === '(' || c === '[' || c === '{') { push('punct', i, i + 1); stack.push(c); i++; continue; }
    if (c === ')' || c === ']' || c === '}') { stack.pop(); i++; push('punct', start, i); continue; }
    const m = /^(?:>>>=|\.\.\.|===|!==|\*\*=|<<=|>>=|>>>|\?\?=|&&=|\|\|=|=>|==|!=|<=|>=|&&|\|\||\?\?|\?\.|\+\+|--|[-+*/%&|^]=|<<|>>|\*\*|.)/s
      .exec(src.slice(i, i + 4));
    i += m[0].length;
    push('punct', start, i);
  }
  return toks;
}

const DECL = new Set(['let', 'const', 'var']);
const NOT_EXPR_START = new Set(['let', 'const', 'var', 'class', 'function', 'async', 'if', 'for', 'while', 'do',
  'try', 'switch', 'return', 'throw', 'break', 'continue', 'import', 'export', 'else', 'catch', 'finally', 'case',
  'default', 'debugger', 'with']);

// statementStarts are the indexes of the tokens at the top level that
// begin a statement (or may: after a newline).
function statementStarts(toks) {
  const out = [];
  for (let j = 0; j < toks.length; j++) {
    const t = toks[j];
    if (t.depth !== 0 || (t.type === 'punct' && t.value === '}')) continue;
    const p = toks[j - 1];
    if (!p || (p.depth === 0 && p.type === 'punct' && (p.value === ';' || p.value === '}')) || (t.nl && p.depth === 0)) {
      out.push(j);
    }
  }
  return out;
}

// bindingNames adds the names a declaration binds, from toks[j] (after
// its keyword): the identifiers of its patterns, of each declarator.
function bindingNames(toks, j, names) {
  const is = (k, v) => toks[k] && toks[k].type === 'punct' && toks[k].value === v;
  // skipExpr passes an initializer: to a ',' or a closing bracket at depth d.
  const skipExpr = (k, d) => {
    while (k < toks.length && !(toks[k].depth === d && /^[,)\]};]$/.test(toks[k].value) && toks[k].type === 'punct')) k++;
    return k;
  };
  const pattern = (k) => {
    const t = toks[k];
    if (!t) return k;
    if (t.type === 'name') { names.add(t.value); return k + 1; }
    if (!is(k, '{') && !is(k, '[')) return k + 1;
    const d = t.depth;
    const obj = t.value === '{';
    k++;
    while (k < toks.length && !(toks[k].depth === d && toks[k].type === 'punct' && /^[}\]]$/.test(toks[k].value))) {
      if (is(k, ',')) { k++; continue; }
      if (is(k, '...')) k++;
      if (obj && is(k, '[')) { // a computed key: its value follows the ':'
        k = skipExpr(k + 1, d + 1) + 1;
        if (is(k, ':')) k = pattern(k + 1);
      } else if (obj && toks[k + 1] && is(k + 1, ':')) {
        k = pattern(k + 2);
      } else {
        k = pattern(k);
      }
      if (is(k, '=')) k = skipExpr(k + 1, d + 1);
      if (k < toks.length && toks[k].depth > d && !is(k, ',')) k = skipExpr(k, d + 1);
    }
    return k + 1;
  };
  let k = pattern(j);
  for (; k < toks.length; k++) {
    const t = toks[k];
    if (t.depth !== 0 || t.type !== 'punct') continue;
    if (t.value === ';') return;
    if (t.value === ',') k = pattern(k + 1) - 1;
  }
}

// rewrite applies the top-level declaration rewrite and says what the
// cell's last statement and top-level names are.
function rewrite(src) {
  const toks = scan(src);
  const starts = statementStarts(toks);
  const edits = []; // [pos, deleteCount, text]
  const names = new Set();
  let hasAwait = false;
  for (const t of toks) if (t.type === 'name' && t.value === 'await') hasAwait = true;
  for (let j = 0; j + 1 < toks.length; j++) {
    const t = toks[j];
    const prev = toks[j - 1];
    if (t.type === 'name' && t.value === 'import' && toks[j + 1].value === '(' && !(prev && prev.value === '.')) {
      edits.push([t.start, t.value.length, '__cellvmImport']);
    }
  }
  for (const j of starts) {
    const t = toks[j];
    const next = toks[j + 1];
    if (t.type !== 'name') continue;
    if (DECL.has(t.value) && next && (next.type === 'name' || next.value === '[' || next.value === '{')) {
      if (t.value !== 'var') edits.push([t.start, t.value.length, t.value === 'let' ? 'var' : 'var  ']);
      bindingNames(toks, j + 1, names);
    } else if (t.value === 'class' && next && next.type === 'name') {
      names.add(next.value);
      edits.push([t.start, 0, 'var ' + next.value + ' = ']);
      let k = j + 2;
      while (k < toks.length && !(toks[k].depth === 0 && toks[k].value === '{')) k++;
      let e = k + 1;
      while (e < toks.length && !(toks[e].depth === 0 && toks[e].value === '}')) e++;
      if (e < toks.length) edits.push([toks[e].end, 0, ';']);
    } else if (t.value === 'function' || (t.value === 'async' && next && next.value === 'function')) {
      let k = j + (t.value === 'async' ? 2 : 1);
      if (toks[k] && toks[k].value === '*') k++;
      if (toks[k] && toks[k].type === 'name') names.add(toks[k].value);
    }
  }
  const last = starts.length ? starts[starts.length - 1] : -1;
  const lt = toks[last];
  const ln = toks[last + 1];
  const lastIsDecl = last >= 0 && lt.type === 'name' && NOT_EXPR_START.has(lt.value) &&
    !(lt.value === 'import' && ln && (ln.value === '(' || ln.value === '.')) &&
    !(lt.value === 'async' && !(ln && ln.value === 'function'));
  const code = applyEdits(src, edits);
  return { code, toks: scan(code), names, hasAwait, lastIsDecl };
}

function applyEdits(src, edits) {
  let out = src;
  for (const [pos, del, text] of edits.slice().sort((a, b) => b[0] - a[0])) {
    out = out.slice(0, pos) + text + out.slice(pos + del);
  }
  return out;
}

const ENDS_EXPR = (t) => t.type !== 'punct' || /^(?:\)|\]|\}|\+\+|--)$/.test(t.value);

// asyncSource wraps a cell with top-level await in an async function that
// returns its last expression statement (if one is found that compiles)
// and copies its top-level declarations to the globals.
function asyncSource(r, filename) {
  const { code, toks, names } = r;
  const exportNames = [...names].filter((x) => /^[A-Za-z_$][\w$]*$/.test(x));
  const fin = exportNames.map((x) => `try{globalThis[${jsonStringify(x)}]=${x}}catch(e){}`).join('');
  const wrap = (body) => `(async () => {try {${body}\n} finally {${fin}}})()`;
  const starts = statementStarts(toks);
  let tries = 0;
  for (let s = starts.length - 1; s >= 0 && tries < 8; s--) {
    const j = starts[s];
    const t = toks[j];
    if (t.type === 'name' && NOT_EXPR_START.has(t.value)) break;
    if (t.type === 'punct' && !/^(?:\(|\[|!|~)$/.test(t.value)) {
      if (t.value === ';') continue;
      break;
    }
    const p = toks[j - 1];
    if (p && !(p.value === ';' || p.value === '}') && !ENDS_EXPR(p)) continue;
    let e = toks.length - 1;
    while (e > j && toks[e].value === ';' && toks[e].depth === 0) e--;
    let bad = false;
    for (let k = j; k <= e; k++) if (toks[k].depth === 0 && toks[k].value === ';') bad = true;
    if (bad) continue;
    tries++;
    const body = code.slice(0, t.start) + 'return (' + code.slice(t.start, toks[e].end) + '\n)' + code.slice(toks[e].end);
    const src = wrap(body);
    try {
      return { script: new vm.Script(src, { filename }), src };
    } catch (err) {
      // not an expression after all: try an earlier start
    }
  }
  const src = wrap(code);
  return { script: new vm.Script(src, { filename }), src };
}

module.exports = { rewrite, asyncSource };
