/* threads.c — four threads open/write/pread/fdopen/close and list a directory
 * concurrently, with one shared descriptor read by all (the table is read
 * without locks).  Usage: threads DIR; prints "threads ok". */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <dirent.h>
static char *base; static int shared;
static void *w(void *a){ long id=(long)a; char p[256], b[512]; for(int i=0;i<2000;i++){ snprintf(p,256,"%s/t%ld-%d",base,id,i%10); int fd=open(p,O_CREAT|O_RDWR|O_TRUNC,0644); if(fd<0){perror("open");return (void*)1;} memset(b,'a'+id,512); if(write(fd,b,512)!=512) return (void*)2; if(pread(fd,b,512,0)!=512||b[0]!='a'+id) return (void*)3; if(pread(shared,b,4,0)!=4) return (void*)4; FILE*f=fdopen(dup(fd),"r"); fgetc(f); fclose(f); close(fd); if(i%100==0){DIR*d=opendir(base); while(readdir(d)); closedir(d);} } return 0; }
int main(int c,char**v){ base=v[1]; char p[256]; snprintf(p,256,"%s/shared",base); shared=open(p,O_CREAT|O_RDWR,0644); write(shared,"abcd",4); pthread_t t[4]; for(long i=0;i<4;i++) pthread_create(&t[i],0,w,(void*)i); long bad=0; for(int i=0;i<4;i++){void*r; pthread_join(t[i],&r); bad|=(long)r;} printf("threads %s\n", bad?"FAIL":"ok"); return bad!=0; }
