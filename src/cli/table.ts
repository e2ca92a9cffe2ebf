/** Small helpers over cli-table3 shared by the commands that print tables. */
import Table from 'cli-table3';
import { colorEnabled } from '../report/terminal.js';

export function renderTable(head: string[], rows: (string | number)[][]): string {
  const table = new Table({ head, style: { head: colorEnabled() ? ['cyan'] : [], border: [] } });
  for (const row of rows) table.push(row.map(String));
  return table.toString();
}

export function renderKeyValues(values: Record<string, string>): string {
  return renderTable(
    ['', ''],
    Object.entries(values).map(([k, v]) => [k, v]),
  );
}
