/* aio.c — POSIX AIO write then read on DIR/aio (served synchronously for
 * kura descriptors, by glibc threads elsewhere).  Usage: aio DIR. */
#include <aio.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
int main(int c,char**v){char p[256];snprintf(p,256,"%s/aio",v[1]);int fd=open(p,O_CREAT|O_RDWR|O_TRUNC,0644);
struct aiocb w={0};char buf[16]="0123456789";w.aio_fildes=fd;w.aio_buf=buf;w.aio_nbytes=10;w.aio_offset=0;
aio_write(&w);const struct aiocb*l[1]={&w};while(aio_error(&w)==EINPROGRESS)aio_suspend(l,1,NULL);printf("write %zd err %d\n",aio_return(&w),aio_error(&w));
struct aiocb r={0};char rb[16]={0};r.aio_fildes=fd;r.aio_buf=rb;r.aio_nbytes=4;r.aio_offset=3;aio_read(&r);l[0]=&r;while(aio_error(&r)==EINPROGRESS)aio_suspend(l,1,NULL);printf("read %zd %s\n",aio_return(&r),rb);return 0;}
