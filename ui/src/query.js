// Prometheus-style selectors: "type{name="value", other=~"re"}".

const OPS = ['=~', '!~', '!=', '='];

function quote(v) {
  return `"${v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`;
}

// Parses the text between the braces ("a=\"b\", c!~\"d\"") into matchers. Throws with a message
// naming the column on a syntax error; an empty text gives [].
export function parseMatchers(text) {
  const out = [];
  let i = 0;
  const n = text.length;
  const ws = () => { while (i < n && /\s/.test(text[i])) i++; };
  const fail = (what) => { throw new Error(`column ${i + 1}: ${what}`); };
  ws();
  while (i < n) {
    const start = i;
    while (i < n && /[A-Za-z0-9_]/.test(text[i])) i++;
    const name = text.slice(start, i);
    if (!name || /^\d/.test(name)) fail('expected a label name');
    ws();
    const op = OPS.find((o) => text.startsWith(o, i));
    if (!op) fail(`expected =, !=, =~ or !~ after ${name}`);
    i += op.length;
    ws();
    if (text[i] !== '"' && text[i] !== "'") fail('expected a quoted value');
    const q = text[i++];
    let value = '';
    while (i < n && text[i] !== q) {
      if (text[i] === '\\' && i + 1 < n) {
        const c = text[i + 1];
        value += c === 'n' ? '\n' : c === 't' ? '\t' : c;
        i += 2;
      } else value += text[i++];
    }
    if (i >= n) fail('unterminated quoted value');
    i++;
    out.push({ name, op, value });
    ws();
    if (i < n) {
      if (text[i] !== ',') fail('expected , between matchers');
      i++;
      ws();
    }
  }
  return out;
}

export function formatMatchers(matchers) {
  return matchers.map((m) => `${m.name}${m.op}${quote(m.value)}`).join(', ');
}

// "type{...}" -> {type, matchersText}. The matcher text is kept verbatim so the editor shows what
// the user typed.
export function splitExpression(expr) {
  if (!expr) return { type: '', matchersText: '' };
  const b = expr.indexOf('{');
  if (b < 0) return { type: expr.trim(), matchersText: '' };
  const e = expr.lastIndexOf('}');
  return { type: expr.slice(0, b).trim(), matchersText: expr.slice(b + 1, e > b ? e : expr.length).trim() };
}

export function joinExpression(type, matchersText) {
  const m = (matchersText || '').trim();
  return m ? `${type}{${m}}` : type;
}

// Adds label="value" matchers for `labels` (an object) to an expression, replacing any
// matcher on the same label. Used when a point of a summed series is selected.
export function withLabels(expr, labels) {
  const { type, matchersText } = splitExpression(expr);
  let matchers;
  try { matchers = parseMatchers(matchersText); } catch { matchers = []; }
  const names = new Set(Object.keys(labels));
  matchers = matchers.filter((m) => !(names.has(m.name) && m.op === '='));
  for (const [name, value] of Object.entries(labels)) matchers.push({ name, op: '=', value });
  return joinExpression(type, formatMatchers(matchers));
}

export function labelsToString(labels) {
  const e = Object.entries(labels || {});
  return e.length ? `{${e.map(([k, v]) => `${k}=${quote(v)}`).join(', ')}}` : '{}';
}
