export * from '../../src/check/cases.js';
