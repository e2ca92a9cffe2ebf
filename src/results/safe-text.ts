/**
 * Text from a results file is data, not terminal instructions: a label holding ESC ] 52 (OSC 52)
 * could write the user's clipboard, ESC [ 2 J clear the screen, a lone CR overwrite the line before.
 * Before such text is printed, every C0 control except newline and tab, DEL, and every C1 control
 * (U+0080–U+009F, which include the one-byte CSI and OSC) is replaced by its escaped spelling, so
 * `\x1b[31m` prints as those seven characters and does nothing. (The HTML report escapes on its own.)
 * The bidirectional controls (U+202A–U+202E embeddings and overrides, U+2066–U+2069 isolates, U+200E/U+200F and
 * U+061C marks) are written out too, as \uNNNN: an override reverses the text after it on the screen, so
 * `a\u202Enosj.exe` shows as `aexe.json`.
 */

// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
const CONTROLS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
const ALL_CONTROLS = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/** The bidirectional controls alone, for checks that refuse them. */
export const BIDI_CONTROLS = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/;

const escaped = (c: string) => {
  const code = c.charCodeAt(0);
  return code > 0xff
    ? `\\u${code.toString(16).padStart(4, '0')}`
    : `\\x${code.toString(16).padStart(2, '0')}`;
};

/** `text` with every terminal control character (but \n and \t) written out as \xNN. */
export function neutraliseControls(text: string): string {
  return text.replace(CONTROLS, escaped);
}

/**
 * `text` as one inert line: every control character, newline and tab included, written out as \xNN
 * (a file name or a parser's message inside a one-line error, or a table heading).
 */
export function neutraliseLine(text: string): string {
  return text.replace(ALL_CONTROLS, escaped);
}

/** A deep copy of a JSON value with every string (keys included) neutralised. */
export function neutraliseStrings<T>(value: T): T {
  if (typeof value === 'string') return neutraliseControls(value) as T;
  if (Array.isArray(value)) return value.map((v) => neutraliseStrings(v)) as T;
  if (value !== null && typeof value === 'object') {
    // A loop, not Object.fromEntries of mapped entries: a report of 40,000 rows copies ~1.2 million fields.
    const copy: Record<string, unknown> = {};
    for (const key of Object.keys(value)) {
      const v = neutraliseStrings((value as Record<string, unknown>)[key]);
      // A key '__proto__' (JSON.parse makes it an own key) is defined as data, not assigned: that sets the prototype.
      if (key === '__proto__')
        Object.defineProperty(copy, key, { value: v, enumerable: true, writable: true });
      else copy[neutraliseControls(key)] = v;
    }
    return copy as T;
  }
  return value;
}
