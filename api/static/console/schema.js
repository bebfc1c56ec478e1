// Edited arguments checked against the tool's JSON Schema before they are sent, by
// @cfworker/json-schema (vendored: ../vendor/cfworker-json-schema). The library decides what
// is valid; this module says what is wrong in the console's words: "path: what is wrong".
import {
  schemaArrayKeyword, schemaKeyword, schemaMapKeyword, Validator,
} from '../vendor/cfworker-json-schema/index.js';

// The draft the conversation checks arguments with (workflows/rules/schemas.py).
const DRAFT = '2020-12';

// Keywords whose error only says that an error follows, about a part of the value.
const WRAPPERS = new Set(['$ref', '$recursiveRef', 'properties', 'patternProperties',
  'additionalProperties', 'unevaluatedProperties', 'dependentSchemas', 'prefixItems', 'items',
  'additionalItems', 'unevaluatedItems', 'allOf', 'if']);
// Keywords whose errors name each missing key, one error per key: said once, for all of them.
const MISSING = new Set(['required', 'dependentRequired', 'dependencies']);
// The schema `false` (nothing fits) as the library reports at the right place: its error for
// `false` itself names the value's location where the keyword's should be.
const NOTHING = () => ({ not: {} });

export function typeOf(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
  return typeof value;
}

const child = (path, key) => (typeof key === 'number' ? `${path}[${key}]` : (path ? `${path}.${key}` : key));
const own = (object, key) => object !== null && typeof object === 'object'
  && Object.prototype.hasOwnProperty.call(object, key);
const nothing = (schema) => schema === false
  || (own(schema, 'not') && Object.keys(schema).length === 1
    && (schema.not === true || (typeOf(schema.not) === 'object' && !Object.keys(schema.not).length)));

function put(object, key, value) { // as JSON.parse does: "__proto__" is a key like any other
  Object.defineProperty(object, key, { value, enumerable: true, writable: true, configurable: true });
}

/** A copy of `schema` to check with: no `format` (an annotation in draft 2020-12, as the
 *  conversation reads it) and `false` as `{not: {}}`. Subschemas are where the library reads
 *  them (its dereference.js tables); every other value is kept as it is. */
function prepared(schema) {
  if (schema === false) return NOTHING();
  if (typeOf(schema) !== 'object') return schema;
  const copy = {};
  for (const [key, sub] of Object.entries(schema)) {
    if (key === 'format') continue;
    if (Array.isArray(sub)) put(copy, key, schemaArrayKeyword[key] ? sub.map(prepared) : sub);
    else if ((schemaMapKeyword[key] || key === 'dependencies') && typeOf(sub) === 'object') {
      const map = {};
      for (const [name, value] of Object.entries(sub)) put(map, name, prepared(value));
      put(copy, key, map);
    } else put(copy, key, schemaKeyword[key] ? prepared(sub) : sub);
  }
  return copy;
}

/** The parts of a JSON pointer as the library writes them (`#/a/0`), decoded. */
function parts(pointer) {
  if (pointer.length <= 1) return [];
  return pointer.slice(2).split('/')
    .map((p) => decodeURIComponent(p).replace(/~1/g, '/').replace(/~0/g, '~'));
}

const parent = (pointer) => pointer.slice(0, pointer.lastIndexOf('/'));

/** The value at an instance location, and its path as the console writes it (`o.list[1]`). */
function locate(value, pointer) {
  let path = '';
  let node = value;
  for (const part of parts(pointer)) {
    if (Array.isArray(node)) {
      path = child(path, Number(part));
      node = node[Number(part)];
    } else {
      path = child(path, part);
      node = own(node, part) ? node[part] : undefined;
    }
  }
  return { path, value: node, at: path || 'arguments' };
}

/** The subschema at a keyword location, through the `$ref`s it passed (undefined: unknown). */
function subschema(root, lookup, pointer) {
  let node = root;
  for (const part of parts(pointer)) {
    if (part === '$ref' && typeOf(node) === 'object') node = lookup[node.__absolute_ref__ || node.$ref];
    else if (own(node, part)) node = node[part];
    else return undefined;
  }
  return node;
}

/** The keys a `required`, `dependentRequired` or `dependencies` misses: [key, needed by]. */
function missing(keyword, schema, value) {
  const keys = [];
  if (keyword === 'required') {
    for (const key of schema.required || []) if (!own(value, key)) keys.push([key, null]);
    return keys;
  }
  for (const [key, needs] of Object.entries(schema[keyword] || {})) {
    if (!own(value, key) || !Array.isArray(needs)) continue;
    for (const need of needs) if (!own(value, need)) keys.push([need, key]);
  }
  return keys;
}

/** What one error of the library says, in the console's words ('' for nothing more). */
function said(e, previous, ctx) {
  const { at, value, path } = locate(ctx.value, e.instanceLocation);
  const where = parent(e.keywordLocation);
  const schema = subschema(ctx.root, ctx.lookup, where);
  if (schema === undefined && e.keyword !== 'false') return `${at}: ${e.error}`; // not found: its words
  const v = schema && schema[e.keyword];
  switch (e.keyword) {
    case 'type': return `${at}: must be ${(Array.isArray(v) ? v : [v]).join(' or ')}, not ${typeOf(value)}`;
    case 'const': return `${at}: must be ${JSON.stringify(v)}`;
    case 'enum': return `${at}: must be one of ${v.map((x) => JSON.stringify(x)).join(', ')}`;
    case 'minLength': return `${at}: must be at least ${v} character${v === 1 ? '' : 's'} long`;
    case 'maxLength': return `${at}: must be at most ${v} characters long`;
    case 'pattern': return `${at}: must match ${v}`;
    case 'minimum': return `${at}: must be ≥ ${v}`;
    case 'maximum': return `${at}: must be ≤ ${v}`;
    case 'exclusiveMinimum': return `${at}: must be > ${v}`;
    case 'exclusiveMaximum': return `${at}: must be < ${v}`;
    case 'multipleOf': return `${at}: must be a multiple of ${v}`;
    case 'minItems': return `${at}: needs at least ${v} item(s)`;
    case 'maxItems': return `${at}: takes at most ${v} item(s)`;
    case 'uniqueItems': return `${at}: items must be unique`;
    case 'minContains': return `${at}: needs at least ${v} matching item(s)`;
    case 'maxContains': return `${at}: takes at most ${v} matching item(s)`;
    case 'minProperties': return `${at}: needs at least ${v} key(s)`;
    case 'maxProperties': return `${at}: takes at most ${v} key(s)`;
    case 'not': {
      if (!nothing(schema)) return `${at}: matches a form that is not allowed`;
      const extra = previous && previous.keywordLocation === where
        && (previous.keyword === 'additionalProperties' || previous.keyword === 'unevaluatedProperties');
      return extra ? `${at}: is not an argument of this tool` : `${at}: is not allowed`;
    }
    case 'false': return `${at}: is not allowed`;
    default:
      if (MISSING.has(e.keyword)) {
        return missing(e.keyword, schema, value).map(([key, by]) => `${child(path, key)}: is required${by === null ? '' : ` with ${by}`}`);
      }
      return `${at}: ${e.error}`;
  }
}

/** The errors that follow errors[i] and are about its subschemas (those of anyOf's forms). */
function inside(errors, i) {
  const prefix = `${errors[i].keywordLocation}/`;
  let end = i + 1;
  while (end < errors.length && errors[end].keywordLocation.startsWith(prefix)) end += 1;
  return errors.slice(i + 1, end);
}

/** The library's errors (in its order: a wrapper, then the errors inside it) as lines. */
function lines(errors, ctx) {
  const out = [];
  const once = new Set();
  const typeFailed = []; // [schema location/, instance location]: the rest would only repeat it
  const after = (e) => typeFailed.some(([s, at]) => e.keywordLocation.startsWith(s)
    && (e.instanceLocation === at || e.instanceLocation.startsWith(`${at}/`)));
  for (let i = 0; i < errors.length; i += 1) {
    const e = errors[i];
    if (after(e)) continue;
    if (e.keyword === 'anyOf' || e.keyword === 'oneOf' || e.keyword === 'contains'
        || e.keyword === 'propertyNames' || (e.keyword === 'dependencies' && inside(errors, i).length)) {
      const sub = inside(errors, i);
      i += sub.length;
      out.push(...grouped(e, sub, ctx));
    } else if (!WRAPPERS.has(e.keyword)) {
      const key = `${e.keywordLocation} ${e.instanceLocation}`;
      if (MISSING.has(e.keyword) && once.has(key)) continue;
      once.add(key);
      out.push(...[said(e, errors[i - 1], ctx)].flat().filter(Boolean));
      if (e.keyword === 'type') typeFailed.push([`${parent(e.keywordLocation)}/`, e.instanceLocation]);
    }
  }
  return out;
}

/** One line for a keyword about several forms: anyOf's, oneOf's, contains', propertyNames'. */
function grouped(e, sub, ctx) {
  const { at, path } = locate(ctx.value, e.instanceLocation);
  const schema = subschema(ctx.root, ctx.lookup, parent(e.keywordLocation)) || {};
  if (e.keyword === 'oneOf') {
    const failed = new Set(sub.map((s) => s.keywordLocation.slice(e.keywordLocation.length + 1).split('/')[0]));
    const valid = (Array.isArray(schema.oneOf) ? schema.oneOf.length : failed.size) - failed.size;
    return [`${at}: must match exactly one of the allowed forms (it matches ${valid})`];
  }
  if (e.keyword === 'contains') return [`${at}: must contain a matching item`];
  if (e.keyword === 'propertyNames') {
    const name = sub.length ? parts(sub[0].instanceLocation).pop() : '';
    return [`${child(path, name)}: is not an allowed name`];
  }
  if (e.keyword === 'dependencies') return lines(sub, ctx);
  const forms = new Map(); // anyOf: each form's errors, in order
  for (const s of sub) {
    const form = s.keywordLocation.slice(e.keywordLocation.length + 1).split('/')[0];
    if (!forms.has(form)) forms.set(form, []);
    forms.get(form).push(s);
  }
  const first = [...forms.values()].map((errors) => lines(errors, ctx)[0]).filter(Boolean);
  if (first.length === 1 && Array.isArray(schema.anyOf) && schema.anyOf.length === 1) return first;
  return [`${at}: matches none of the allowed forms (${first.join(' | ')})`];
}

/** The errors of `value` against `schema`, as "path: what is wrong" lines (none: valid). A
 *  schema the page cannot apply (a `$ref` to elsewhere, a pattern this browser cannot read)
 *  finds none: the conversation checks the arguments anyway, and says why it refuses them. */
export function validate(schema, value) {
  if (schema === true || schema === undefined || schema === null) return [];
  let ctx;
  let result;
  try {
    const root = prepared(schema);
    const validator = new Validator(root, DRAFT, false);
    result = validator.validate(value);
    ctx = { root, lookup: validator.lookup, value };
  } catch {
    return [];
  }
  if (result.valid) return [];
  try {
    const out = lines(result.errors, ctx);
    return out.length ? out : ['arguments: do not fit the tool\'s schema'];
  } catch {
    return result.errors.filter((e) => !WRAPPERS.has(e.keyword)).map((e) => `${e.instanceLocation}: ${e.error}`);
  }
}
