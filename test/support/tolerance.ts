export * from '../../src/check/accuracy.js';
