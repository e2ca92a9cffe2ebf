/** Process entry of the `attnlab` command (bin/attnlab.js loads the compiled copy of this file). */
import { main } from './main.js';

process.exitCode = await main(process.argv.slice(2));
