int triangle(int n);
const char *greeting(void);
